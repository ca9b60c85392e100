"""``vfl evaluate``: the label owner scores its held-out test IDs through the scoring protocol and computes the
metrics (issue 31; docs/serving.md, "Evaluation on held-out IDs"). A thin face: the hub is
:class:`vfl.net.scoring.ScoringHubNode` (the parties run ``vfl serve``), the metrics are
:mod:`vfl.models.evaluation`; registered on the ``vfl`` group by :mod:`vfl.cli`."""

from __future__ import annotations

import json
from typing import Any

import click

from vfl.cli.options import emit, member_ledger_options

__all__ = ["evaluate"]


@click.command()
@click.option("--model", "model_path", type=click.Path(dir_okay=False), required=True,
              help="The released model JSON (every serving party holds the same file).")
@click.option("--labels", "labels_path", type=click.Path(dir_okay=False), required=True,
              help="The label owner's test file: a CSV with a header, one ID column and one label column. Its IDs "
                   "are the query; the labels never leave this process.")
@click.option("--label-column", default=None,
              help="The label column of --labels (default: the column that is not --id-column).")
@click.option("--id-column", default=None,
              help="The ID column of --labels (default: the column that is not --label-column).")
@click.option("--out", type=click.Path(dir_okay=False), required=True,
              help="Metrics JSON (atomic write): linear MSE, RMSE, MAE, R^2; logistic accuracy, AUC, log-loss, Brier "
                   "and the calibration table; the counts of queried, scored and missing IDs.")
@click.option("--scores-out", type=click.Path(dir_okay=False), default=None,
              help="Also keep the scores CSV of the test IDs (as `vfl score --out`), at the label owner.")
@click.option("--bins", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Logistic: equal-width probability bins of the calibration table.")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite existing --out / --scores-out files.")
@click.option("--bind", default="tcp://127.0.0.1:5560", show_default=True,
              help="Endpoint the serving parties (`vfl serve`) connect to.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the parties to register, and for each party's answer or heartbeat.")
@click.option("--max-query-ids", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True,
              help="Largest number of test IDs (a larger file is refused before anything is sent); every "
                   "`vfl serve` refuses a plan above its own --max-query-ids.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="Enable CURVE: directory with coordinator.key_secret and the serving parties' public keys.")
@click.option("--allow-plaintext-public", is_flag=True,
              help="Listen on a non-loopback --bind without CURVE (test IDs and masked scores in clear). Only on a "
                   "network you trust.")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="Pinned NAME.sign.pub of the parties (`vfl keys`): every party's signature on the model must be "
                   "under the key pinned here (default: under the keys the model's roster records).")
@click.option("--allow-unsigned-model", is_flag=True,
              help="INSECURE: use a model file that carries no party's signature; warns loudly. A file with a "
                   "missing or invalid signature is refused even so.")
@click.option("--dp-epsilon", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Release the metrics with (epsilon, delta)-differential privacy for the test rows (discrete "
                   "Gaussian noise on bounded sums; AUC is then not released), charged to the label owner's "
                   "privacy ledger. Default: exact metrics, not private.")
@click.option("--dp-delta", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=1e-6,
              show_default=True, help="The delta of --dp-epsilon.")
@click.option("--name", default=None,
              help="--dp-epsilon: the label owner's party name, whose ledger is charged (default: the model's "
                   "label owner).")
@member_ledger_options
@click.option("--quiet", "-q", is_flag=True, help="Print only the metrics.")
def evaluate(model_path: str, labels_path: str, label_column: str | None, id_column: str | None, out: str,
             scores_out: str | None, bins: int, force: bool, bind: str, timeout: float, max_query_ids: int,
             curve_dir: str | None, allow_plaintext_public: bool, identity_dir: str | None,
             allow_unsigned_model: bool, dp_epsilon: float | None, dp_delta: float, name: str | None,
             ledger_path: str | None, budget: str | None, dataset_name: str | None, quiet: bool) -> None:
    """The label owner's held-out evaluation: score the test IDs through the scoring protocol, compute the metrics."""
    from vfl.data.files import check_writable
    from vfl.models.evaluation import evaluate_scores, format_metrics, read_labels_file
    from vfl.models.modelio import atomic_write_text
    from vfl.net.notices import check_bind
    from vfl.net.scoring import ScoringHubNode, write_scores
    from vfl.net.transport import load_server_keys
    from vfl.protocols.model_signing import load_signed_model
    from vfl.protocols.scoring import check_query
    from vfl.secure.identity import load_pinned

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public, role="scoring hub")
    _distinct_paths({"--model": model_path, "--labels": labels_path, "--out": out, "--scores-out": scores_out})
    for path in (out, scores_out):
        if path is not None:
            check_writable(path, force=force)
    model = load_signed_model(model_path, allow_unsigned=allow_unsigned_model,
                              pinned=None if identity_dir is None else load_pinned(identity_dir))
    id_name, ids, labels = read_labels_file(labels_path, label_column or model.label_name, id_column)
    check_query(ids, max_query_ids)   # empty, duplicate or too many IDs: refused before anyone is contacted
    if model.model == "logistic" and not all(v in (0.0, 1.0) for v in labels):
        from vfl.exceptions import DataValidationError

        raise DataValidationError(f"labels file {labels_path}: a logistic model's labels must be 0 or 1")
    charge, score_bounds = None, None
    if dp_epsilon is not None:   # refused (bounds, budget) before anyone is contacted; recorded before the release
        score_bounds = _private_bounds(model)
        charge = _reserve(model, labels_path, len(ids), dp_epsilon, dp_delta, name, ledger_path, budget,
                          dataset_name)
    elif ledger_path or budget or dataset_name or name:
        raise click.UsageError("--name, --ledger, --budget and --dataset-name charge a DP release: give --dp-epsilon")
    curve = load_server_keys(curve_dir) if curve_dir else None
    hub = ScoringHubNode(model, bind, curve=curve, timeout=timeout, max_query_ids=max_query_ids,
                         log=None if quiet else emit)
    try:
        hub.start()
        scores = hub.score(ids)
    except BaseException as exc:
        hub.close(reason=str(exc) or type(exc).__name__)
        if charge is not None:
            charge[0].finish(charge[1], "aborted", str(exc) or type(exc).__name__)
        raise
    hub.close()
    if charge is None or dp_epsilon is None or score_bounds is None:
        record = evaluate_scores(model.model, labels, scores.value, scores.missing, bins=bins)
    else:
        try:
            record = _private_record(model, labels, scores, dp_epsilon, dp_delta, bins, score_bounds)
        except BaseException as exc:   # the spend stays counted; the run is marked aborted, not left reserved
            charge[0].finish(charge[1], "aborted", str(exc) or type(exc).__name__)
            raise
        record["privacy"]["ledger"] = str(charge[0].path)
        charge[0].finish(charge[1], "completed")
    if scores_out is not None:
        write_scores(scores_out, model, scores, id_name)
    lines = format_metrics(record)
    atomic_write_text(out, json.dumps(record, indent=2) + "\n")
    for line in lines:
        emit(line)
    if charge is None:
        emit(f"metrics -> {out} (exact, not differentially private; only this file leaves the label owner if it "
              "is shared)")
    else:
        emit(f"metrics -> {out} (differentially private for the test rows: epsilon {dp_epsilon:g}, delta "
              f"{dp_delta:g}, charged to {charge[0].path}; AUC not released)")


def _distinct_paths(paths: dict[str, str | None]) -> None:
    """Refuse an output that is an input or the other output (--force would overwrite the labels or the model)."""
    from pathlib import Path

    seen: dict[Path, str] = {}
    for option, path in paths.items():
        if path is None:
            continue
        key = Path(path).resolve()
        if key in seen:
            raise click.UsageError(f"{seen[key]} and {option} name the same file {path}")
        seen[key] = option


def _reserve(model: Any, labels_path: str, n_rows: int, epsilon: float, delta: float, name: str | None,
             ledger_path: str | None, budget: str | None, dataset_name: str | None) -> tuple[Any, str]:
    """Reserve the DP release's spend in the label owner's ledger (a Gaussian-DP ``mu``); (ledger, run id)."""
    import secrets

    from vfl.cli.options import open_member_ledger
    from vfl.net.scoring import model_digest
    from vfl.privacy.calibration import calibrate_mu
    from vfl.privacy.ledger import dataset_key, gaussian_spend

    owner = name or next((p.name for p in model.parties if p.label_owner), None)
    if owner is None:
        raise click.UsageError("the model names no label owner: give --name")
    ledger, lifetime = open_member_ledger(owner, ledger_path, budget)
    run_id = "evaluate-" + secrets.token_hex(8)
    key = dataset_key(["(held-out labels)"], n_rows, label=model.label_name, name=dataset_name, files=[labels_path])
    spend = gaussian_spend("evaluation-gaussian", epsilon, delta, calibrate_mu(epsilon, delta))
    before, after = ledger.reserve(key, run_id, spend, budget=lifetime, coordinator="vfl evaluate",
                                   plan_digest=model_digest(model))
    emit(f"[{owner}] privacy ledger {ledger.path}: this evaluation spends epsilon {epsilon:g} (delta {delta:g}); "
          f"spent before {before.epsilon:.4g}, after {after.epsilon:.4g} (composed at delta {after.delta:g})")
    return ledger, run_id


def _private_bounds(model: Any) -> tuple[float, float]:
    """The public score range of a DP evaluation (and, linear, the label bounds checked): refused in one line
    before the ledger is charged or any serving party is contacted."""
    from vfl.models.private_evaluation import label_range, score_range

    bounds = model.column_bounds()
    low, high = score_range(model.coef_, model.intercept_, bounds[:, 0], bounds[:, 1])
    if model.model == "linear":
        label_range(model.label_bounds)
    return low, high


def _private_record(model: Any, labels: Any, scores: Any, epsilon: float, delta: float, bins: int,
                    score_bounds: tuple[float, float]) -> dict:
    from vfl.models.private_evaluation import private_metrics
    from vfl.rng import secure_generator

    return private_metrics(model.model, labels, scores.value, scores.missing, epsilon=epsilon, delta=delta,
                           score_bounds=score_bounds, label_bounds=model.label_bounds, bins=bins,
                           rng=secure_generator())
