"""``vfl party``: one organisation's columns in a vertical run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from vfl.cli.options import echo, member_ledger_options, member_link_options, open_member_ledger
from vfl.exceptions import ConfigurationError
from vfl.protocols.policy import DEFAULT_MAX_DELTA as DEFAULT_PLAN_MAX_DELTA
from vfl.protocols.policy import DEFAULT_MAX_EPSILON as DEFAULT_PLAN_MAX_EPSILON
from vfl.protocols.policy import DEFAULT_MECHANISMS as DEFAULT_PLAN_MECHANISMS

__all__ = ["party"]


# ---------------------------------------------------------------------------------------------- party
@click.command()
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help="Party config TOML ([party] name, connect, data|dataset, features, label, id, bounds, curve_dir, "
                   "identity_dir).")
@click.option("--connect", default=None, help="Coordinator endpoint, e.g. tcp://127.0.0.1:5555.")
@click.option("--name", default=None, help="This party's unique name.")
@click.option("--data", type=click.Path(dir_okay=False), default=None, help="CSV file with a header row.")
@click.option("--features", default=None,
              help="Columns to use: names, name ranges FIRST:LAST, or 0-based indices/ranges 2-5; comma separated "
                   "(a label owner may have none).")
@click.option("--label", default=None, help="Label column (exactly one party, the label owner).")
@click.option("--id", "id_column", default=None,
              help="Row-ID column (text; any row order): the parties align their rows by a private set intersection "
                   "of these IDs and train on the IDs common to all (docs/psi.md). Give it on every party or none.")
@click.option("--rows-aligned", is_flag=True,
              help="State that this table holds the same people in the same row order as every co-party's table "
                   "(rows are then paired by position). Without --id a party runs only with it (a built-in data set "
                   "is aligned by construction).")
@click.option("--bounds", type=click.Path(dir_okay=False), default=None,
              help="TOML file '[bounds] column = [lo, hi]' of public column (and label) bounds. Required (here or "
                   "inline in --config) for every column and the label unless --allow-data-derived-bounds, or "
                   "--allow-mechanisms lists only mechanisms that use no bounds (none, bcd, dp-bcd).")
@click.option("--allow-data-derived-bounds", is_flag=True,
              help="Start WITHOUT declared bounds: they are taken from this party's private data (min/max), warns, "
                   "and the model is NOT formally differentially private (its report says formal DP: no).")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="Signing identities (`vfl keys`): this party's NAME.sign.secret and the pinned NAME.sign.pub of "
                   "every co-party it accepts. Every co-party's registration, roster entry and message is checked "
                   "against them; a plan with a party not pinned here is refused. Required unless "
                   "--insecure-no-identity.")
@click.option("--insecure-no-identity", is_flag=True,
              help="Run WITHOUT signing identities (loopback experiments only): a hostile coordinator could then "
                   "substitute keys, invent parties and forge responses. Warns, and the model's report says so.")
@click.option("--order", type=int, default=None,
              help="Position of this party in the global column order (default: parties sorted by name).")
@click.option("--insecure-test-keys", is_flag=True, help="Accept Paillier keys below 2048 bits (tests only).")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Progress of encryption and secure products on stderr: a bar on a terminal, plain "
                   "'[progress] ...' lines (every 10 %, at least every 30 s) in a log file.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed this party's noise (reproducible experiments only; the privacy report flags it).")
@click.option("--allow-mechanisms", default=",".join(sorted(DEFAULT_PLAN_MECHANISMS)), show_default=True,
              help="Mechanisms this party agrees to run (comma separated); the default holds only formally DP ones. "
                   "'none' and 'bcd' add no noise and 'dp-bcd' is never formally DP: they run only if listed here. "
                   "'noisy-gd' too: a co-party that crafts its encrypted operand can amplify one of this party's rows "
                   "(docs/threat_model.md).")
@click.option("--min-epsilon", type=float, default=None,
              help="Refuse a plan whose epsilon is below this (default: no minimum).")
@click.option("--max-epsilon", type=float, default=DEFAULT_PLAN_MAX_EPSILON, show_default=True,
              help="Refuse a plan whose true epsilon (as this party's own privacy report computes it) exceeds this.")
@click.option("--max-delta", type=float, default=DEFAULT_PLAN_MAX_DELTA, show_default=True,
              help="Refuse a plan whose delta exceeds this.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local processes for encryption and secure products, and threads for PSI blinding with --id "
                   "(default: all cores for big runs).")
@click.option("--executor", default=None, metavar="tcp://SCHEDULER:8786",
              help="Run this party's encryption and multi-exponentiations on its Dask cluster (pip install "
                   "'vfl[dask]'; the workers must run inside this party's trust domain).")
@click.option("--max-frame-bytes", type=click.IntRange(min=4096, max=64 * 2**20), default=None,
              help="Largest ciphertext frame this party sends (secure products are streamed in chunks of this size, "
                   "credit-based). Default: 4 MiB, or less if the coordinator's --max-message-bytes needs it.")
@click.option("--model-out", type=click.Path(dir_okay=False), default=None,
              help="Where to store the model every party signed at the end of a run (the file `vfl serve` "
                   "serves). Default: model-NAME-RUN.json next to this party's ledger.")
@member_ledger_options
@member_link_options(hub="coordinator")
def party(config: str | None, connect: str | None, name: str | None, data: str | None, features: str | None,
          label: str | None, id_column: str | None, rows_aligned: bool, bounds: str | None,
          allow_data_derived_bounds: bool,
          curve_dir: str | None, identity_dir: str | None, insecure_no_identity: bool, timeout: float,
          order: int | None, insecure_test_keys: bool, progress: bool, seed: int | None, allow_mechanisms: str,
          min_epsilon: float | None, max_epsilon: float, max_delta: float,
          workers: int | None, executor: str | None, max_frame_bytes: int | None, model_out: str | None,
          ledger_path: str | None, budget: str | None, dataset_name: str | None) -> None:
    """Run one party: read its columns, register, compute its blocks and secure-product sides.

    Before it touches its data the party checks the coordinator's PLAN against its own policy (--allow-mechanisms,
    --min-epsilon, --max-epsilon, --max-delta) and prints the plan it is about to run; then it checks the signed
    roster against its pinned identities (--identity-dir): every co-party pinned, every signature valid. A plan over
    its privacy budget (--ledger, --budget; docs/privacy.md) is refused when it arrives; an accepted plan's spend is
    reserved once the roster verifies, before anything data-dependent is sent.
    """
    from vfl.data.config import PartyConfig, check_row_alignment, load_party_config
    from vfl.net.party import PartyNode
    from vfl.net.transport import load_client_keys
    from vfl.protocols.policy import PartyPolicy

    policy = PartyPolicy.from_options(allow_mechanisms, min_epsilon, max_epsilon, max_delta)

    cfg = load_party_config(config) if config else PartyConfig()
    cfg.name = name or cfg.name
    cfg.connect = connect or cfg.connect
    if data:
        cfg.data, cfg.dataset = data, None
    if features:
        cfg.features = [features]
    cfg.label = label or cfg.label
    cfg.id = id_column or cfg.id
    cfg.rows_aligned = rows_aligned or cfg.rows_aligned
    cfg.bounds = bounds or cfg.bounds
    cfg.curve_dir = curve_dir or cfg.curve_dir
    cfg.identity_dir = identity_dir or cfg.identity_dir
    cfg.ledger = ledger_path or cfg.ledger
    cfg.budget = budget or cfg.budget
    cfg.dataset_name = dataset_name or cfg.dataset_name
    if executor is not None and not executor.startswith(("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")):
        raise ConfigurationError(f"--executor must be a Dask scheduler address like tcp://HOST:8786, got {executor!r}")
    for what, value in (("--name", cfg.name), ("--connect", cfg.connect),
                        ("--features", cfg.features or cfg.label)):
        if not value:
            raise ConfigurationError(f"missing {what} (give it on the command line or in --config)")
    if not (cfg.data or cfg.dataset):
        raise ConfigurationError("missing --data FILE.csv (or dataset = ... in --config)")
    if not cfg.identity_dir and not insecure_no_identity:   # before any data is read
        raise ConfigurationError(f"party {cfg.name} has no signing identity: pass --identity-dir DIR (made by "
                                 "`vfl keys`), or --insecure-no-identity for loopback experiments only")
    check_row_alignment(cfg)                   # aligned rows or a refusal, before the table is read (issue 31)
    ledger, lifetime = _open_ledger(cfg)       # checked before the table is read: a corrupted ledger costs nothing
    from vfl.protocols.local_data import load_party_data

    local = load_party_data(cfg, config)
    curve = load_client_keys(cfg.curve_dir, cfg.name) if cfg.curve_dir else None  # type: ignore[arg-type]
    node = PartyNode(local, cfg.connect, curve=curve, timeout=timeout, order=order,  # type: ignore[arg-type]
                     progress=progress, allow_insecure_keys=insecure_test_keys, log=echo, random_state=seed,
                     policy=policy, workers=workers, executor=executor, max_frame_bytes=max_frame_bytes,
                     identity_dir=cfg.identity_dir, insecure_no_identity=insecure_no_identity,
                     allow_data_derived_bounds=allow_data_derived_bounds,
                     ledger=ledger, budget=lifetime, dataset_name=cfg.dataset_name, model_out=model_out,
                     dataset_files=[str(Path(cfg.data).resolve())] if cfg.data else [f"built-in:{cfg.dataset}"])
    echo(f"[{cfg.name}] {local.n_rows} rows, {len(local.feature_names)} features"
          + (f", label {cfg.label}" if cfg.label else "") + f"; connecting to {cfg.connect}")
    model_ = node.run()
    echo(f"[{cfg.name}] done: model released ({len(model_.coef_)} coefficients, mechanism {model_.mechanism})")


def _open_ledger(cfg: Any) -> tuple[Any, Any]:
    """The party's privacy ledger (checked: one line and exit 1 if unreadable or corrupted) and its budget."""
    return open_member_ledger(cfg.name, cfg.ledger, cfg.budget)
