"""``vfl evaluate``: the label owner scores its held-out test IDs through the scoring protocol and computes the
metrics (issue 31; docs/serving.md, "Evaluation on held-out IDs"). A thin face: the hub is
:class:`vfl.net.scoring.ScoringHubNode` (the parties run ``vfl serve``), the metrics are
:mod:`vfl.models.evaluation`; registered on the ``vfl`` group by :mod:`vfl.cli`."""

from __future__ import annotations

import json
import sys

import click

__all__ = ["evaluate"]


def _echo(text: str) -> None:
    click.echo(text)
    sys.stdout.flush()


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
@click.option("--quiet", "-q", is_flag=True, help="Print only the metrics.")
def evaluate(model_path: str, labels_path: str, label_column: str | None, id_column: str | None, out: str,
             scores_out: str | None, bins: int, force: bool, bind: str, timeout: float, max_query_ids: int,
             curve_dir: str | None, allow_plaintext_public: bool, identity_dir: str | None,
             allow_unsigned_model: bool, quiet: bool) -> None:
    """The label owner's held-out evaluation: score the test IDs through the scoring protocol, compute the metrics."""
    from vfl.data.files import check_writable
    from vfl.models.evaluation import evaluate_scores, format_metrics, read_labels_file
    from vfl.net.model_signing import load_signed_model
    from vfl.net.modelio import atomic_write_text
    from vfl.net.notices import check_bind
    from vfl.net.scoring import ScoringHubNode, write_scores
    from vfl.net.transport import load_server_keys
    from vfl.protocols.scoring import check_query
    from vfl.secure.identity import load_pinned

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public, role="scoring hub")
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
    curve = load_server_keys(curve_dir) if curve_dir else None
    hub = ScoringHubNode(model, bind, curve=curve, timeout=timeout, max_query_ids=max_query_ids,
                         log=None if quiet else _echo)
    try:
        hub.start()
        scores = hub.score(ids)
    except BaseException as exc:
        hub.close(reason=str(exc) or type(exc).__name__)
        raise
    hub.close()
    record = evaluate_scores(model.model, labels, scores.value, scores.missing, bins=bins)
    if scores_out is not None:
        write_scores(scores_out, model, scores, id_name)
    atomic_write_text(out, json.dumps(record, indent=2) + "\n")
    for line in format_metrics(record):
        _echo(line)
    _echo(f"metrics -> {out} (exact, not differentially private; only this file leaves the label owner if it is "
          "shared)")
