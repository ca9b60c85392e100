"""Held-out evaluation of a released model at the label owner: metrics of scores against the labels of test IDs.

The label owner, who holds ``y`` for the test IDs, is the requester of the scoring protocol (``vfl evaluate``, the
hub of docs/serving.md): it learns the score of every test ID the parties all hold, and computes here, with no
socket, the metrics below. Nothing of this module sends anything; what leaves the label owner is the metrics file
it chooses to share (docs/serving.md, "Evaluation on held-out IDs").

Linear model (prediction ``f_i``, label ``y_i``, the n scored IDs):

* ``mse = (1/n) sum (y_i - f_i)^2``, ``rmse = sqrt(mse)``, ``mae = (1/n) sum |y_i - f_i|``;
* ``r2 = 1 - sum (y_i - f_i)^2 / sum (y_i - ybar)^2`` with ``ybar`` the test mean (the out-of-sample coefficient of
  determination as statsmodels and scikit-learn's ``r2_score`` define it; None when all test labels are equal).

Logistic model (probability ``p_i``, label ``y_i`` in {0, 1}):

* ``accuracy``: the share of ``[p_i >= 1/2] == y_i`` (the 0/1 label of ``vfl score``, ``z >= 0``), next to the
  base-rate accuracy ``max(ybar, 1 - ybar)`` of predicting the majority class;
* ``auc``: the area under the ROC curve as the Mann-Whitney statistic ``U / (n_1 n_0)`` (Hanley & McNeil 1982),
  ties counted one half, through average ranks; None with one class only;
* ``log_loss = -(1/n) sum [y_i ln p_i + (1 - y_i) ln(1 - p_i)]``, ``p`` clipped to ``[1e-15, 1 - 1e-15]``;
* ``brier = (1/n) sum (p_i - y_i)^2``;
* a calibration table (reliability diagram, DeGroot & Fienberg 1983): ``bins`` equal-width bins of ``[0, 1]`` (the
  last one closed), per bin the count, the mean predicted probability and the observed rate of ``y = 1``.

The metrics are exact functions of the test rows and are **not** differentially private: the DP guarantee of the
training covers the model, not the scores of new rows (docs/serving.md).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError

__all__ = ["regression_metrics", "classification_metrics", "calibration_table", "roc_auc", "evaluate_scores",
           "read_labels_file", "format_metrics", "paired", "LOG_LOSS_CLIP", "DEFAULT_BINS"]

LOG_LOSS_CLIP = 1e-15
DEFAULT_BINS = 10


def paired(y: Any, f: Any) -> tuple[np.ndarray, np.ndarray]:
    y, f = np.asarray(y, dtype=float).reshape(-1), np.asarray(f, dtype=float).reshape(-1)
    if y.shape != f.shape:
        raise DataValidationError(f"{y.size} labels for {f.size} scores")
    if y.size == 0:
        raise DataValidationError("no scored test ID: nothing to evaluate (are the test IDs held by every party?)")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(f))):
        raise DataValidationError("labels and scores must be finite numbers")
    return y, f


def regression_metrics(y: Any, prediction: Any) -> dict[str, Any]:
    """MSE, RMSE, MAE and the out-of-sample R^2 of ``prediction`` against ``y`` (module docstring)."""
    y, f = paired(y, prediction)
    resid = y - f
    sse = float(resid @ resid)
    sst = float(((y - y.mean()) ** 2).sum())
    mse = sse / y.size
    return {"n": int(y.size), "mse": mse, "rmse": math.sqrt(mse), "mae": float(np.abs(resid).mean()),
            "r2": None if sst == 0.0 else 1.0 - sse / sst, "mean_label": float(y.mean()),
            "mse_of_the_mean": sst / y.size}


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, ties given the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    ranks = np.empty(values.size, dtype=float)
    start = 0
    while start < values.size:
        stop = start + 1
        while stop < values.size and sorted_vals[stop] == sorted_vals[start]:
            stop += 1
        ranks[order[start:stop]] = 0.5 * (start + 1 + stop)
        start = stop
    return ranks


def roc_auc(y: Any, score: Any) -> float | None:
    """``U / (n_1 n_0)``, ``U = sum of the positives' average ranks - n_1 (n_1 + 1)/2``: the probability that a
    random positive scores above a random negative, ties one half. None with one class only."""
    y, s = paired(y, score)
    n1 = int((y == 1).sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        return None
    u = float(_average_ranks(s)[y == 1].sum()) - n1 * (n1 + 1) / 2.0
    return u / (n1 * n0)


def calibration_table(y: Any, probability: Any, bins: int = DEFAULT_BINS) -> list[dict[str, Any]]:
    """Per equal-width bin of [0, 1]: ``low``, ``high``, ``count``, ``mean_predicted``, ``observed_rate`` (None for
    an empty bin). Bin b holds ``low <= p < high``; the last bin includes 1."""
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 1000:
        raise ConfigurationError(f"--bins must be an integer in [1, 1000], got {bins!r}")
    y, p = paired(y, probability)
    index = np.minimum((p * bins).astype(int), bins - 1)
    table = []
    for b in range(bins):
        mask = index == b
        count = int(mask.sum())
        table.append({"low": b / bins, "high": (b + 1) / bins, "count": count,
                      "mean_predicted": float(p[mask].mean()) if count else None,
                      "observed_rate": float(y[mask].mean()) if count else None})
    return table


def classification_metrics(y: Any, probability: Any, bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """Accuracy (with the base-rate accuracy), AUC, log-loss, Brier score and the calibration table."""
    y, p = paired(y, probability)
    if not np.all((y == 0) | (y == 1)):
        raise DataValidationError("a logistic model's test labels must be 0 or 1")
    if np.any((p < 0) | (p > 1)):
        raise DataValidationError("probabilities must lie in [0, 1]")
    rate = float(y.mean())
    q = np.clip(p, LOG_LOSS_CLIP, 1.0 - LOG_LOSS_CLIP)
    return {"n": int(y.size), "accuracy": float(((p >= 0.5) == (y == 1)).mean()),
            "base_rate": rate, "base_rate_accuracy": max(rate, 1.0 - rate), "auc": roc_auc(y, p),
            "log_loss": float(-(y * np.log(q) + (1.0 - y) * np.log(1.0 - q)).mean()),
            "brier": float(((p - y) ** 2).mean()), "calibration": calibration_table(y, p, bins)}


def evaluate_scores(model: str, y: Any, value: Any, missing: Any, *, bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """The evaluation record of one query: the metrics over the IDs scored (``missing`` False), and how many test
    IDs were queried and missing (not held by every party: left out, never scored as zero)."""
    y, value, missing = (np.asarray(y, dtype=float).reshape(-1), np.asarray(value, dtype=float).reshape(-1),
                         np.asarray(missing, dtype=bool).reshape(-1))
    if not y.shape == value.shape == missing.shape:
        raise DataValidationError(f"{y.size} labels for {value.size} scores")
    keep = ~missing
    if model == "linear":
        metrics = regression_metrics(y[keep], value[keep])
    elif model == "logistic":
        metrics = classification_metrics(y[keep], value[keep], bins)
    else:
        raise ConfigurationError(f"model must be linear or logistic, got {model!r}")
    return {"model": model, "n_queried": int(y.size), "n_scored": int(keep.sum()), "n_missing": int(missing.sum()),
            "metrics": metrics, "differentially_private": False,
            "note": "exact metrics of the scored test IDs, computed by the label owner from the scores it requested; "
                    "not differentially private (the training's guarantee covers the model, not new rows' scores)"}


def read_labels_file(path: str | Path, label_column: str | None, id_column: str | None
                     ) -> tuple[str, list[str], np.ndarray]:
    """(ID column name, the IDs as written, the labels) of the label owner's test file: a CSV with a header, an ID
    column and a label column. ``label_column`` / ``id_column`` name them; with two columns one name suffices."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigurationError(f"labels file {p} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataValidationError(f"cannot read labels file {p}: {exc}") from None
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if len(rows) < 2:
        raise DataValidationError(f"labels file {p} holds no rows (expected a header, then an ID and a label per line)")
    header = [h.strip() for h in rows[0]]
    label_column, id_column = _columns(header, label_column, id_column, p)
    li, ii = header.index(label_column), header.index(id_column)
    ids, labels = [], []
    for n, r in enumerate(rows[1:], start=2):
        cell = r[li].strip() if li < len(r) else ""
        try:
            value = float(cell)
        except ValueError:
            raise DataValidationError(f"labels file {p}, line {n}: label {cell!r} is not a number") from None
        if not math.isfinite(value):
            raise DataValidationError(f"labels file {p}, line {n}: label {cell!r} is not finite")
        ids.append(r[ii] if ii < len(r) else "")
        labels.append(value)
    return id_column, ids, np.asarray(labels)


def _columns(header: Sequence[str], label: str | None, ident: str | None, path: Path) -> tuple[str, str]:
    for name, what in ((label, "label"), (ident, "ID")):
        if name is not None and name not in header:
            raise DataValidationError(f"unknown {what} column {name!r} in {path}; columns are: {', '.join(header)}")
    others = [h for h in header if h not in (label, ident)]
    if label is None:
        if len(others) != 1:
            raise ConfigurationError(f"name the label column of {path} with --label-column (columns: "
                                     f"{', '.join(header)})")
        label = others[0]
    if ident is None:
        rest = [h for h in header if h != label]
        if len(rest) != 1:
            raise ConfigurationError(f"name the ID column of {path} with --id-column (columns: {', '.join(header)})")
        ident = rest[0]
    if label == ident:
        raise ConfigurationError("the ID column and the label column must differ")
    return label, ident


def format_metrics(record: dict[str, Any]) -> list[str]:
    """The lines ``vfl evaluate`` prints."""
    m = record["metrics"]

    def num(v: Any) -> str:
        return "n/a" if v is None else f"{v:.4g}"

    lines = [f"held-out evaluation: {record['n_scored']} of {record['n_queried']} test IDs scored "
             f"({record['n_missing']} missing: not held by every party, left out)"]
    if m.get("noise_std"):
        lines.append("  differentially private: noise std " + ", ".join(f"{k} {num(v)}" for k, v in
                                                                   m["noise_std"].items()))
    if record["model"] == "linear":
        lines.append(f"  MSE {num(m['mse'])}  RMSE {num(m['rmse'])}  MAE {num(m['mae'])}  R^2 {num(m['r2'])} "
                     f"(predicting the test mean: MSE {num(m['mse_of_the_mean'])})")
        return lines
    lines.append(f"  accuracy {num(m['accuracy'])} (base rate {num(m['base_rate_accuracy'])})  AUC {num(m['auc'])}  "
                 f"log-loss {num(m['log_loss'])}  Brier {num(m['brier'])}")
    lines.append("  calibration: bin, count, mean predicted, observed rate")
    lines.extend(f"    [{b['low']:.2f}, {b['high']:.2f}{']' if b['high'] == 1.0 else ')'}  {num(b['count']):>6}  "
                 f"{num(b['mean_predicted']):>8}  {num(b['observed_rate']):>8}" for b in m["calibration"] if b["count"])
    return lines
