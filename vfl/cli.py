"""The ``vfl`` command: coordinator, party, budget, predict, keys, demo.

Every user error ends with one line ``vfl: error: ...`` on stderr and a non-zero exit code, never a
traceback:

====  ==========================================================================
code  meaning
====  ==========================================================================
0     success
1     other vfl error (privacy parameters, keys, degenerate objective, ...)
2     bad option, configuration or data (ConfigurationError, DataValidationError), or a policy refusal: a
      plan above the member's limits or its privacy budget (BudgetError)
3     a party failed, timed out or the run was aborted (PartyFailure)
4     protocol violation by a peer (ProtocolError)
130   interrupted (Ctrl-C)
====  ==========================================================================
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from vfl.data.files import check_writable
from vfl.exceptions import (
    BudgetError,
    ConfigurationError,
    DataValidationError,
    PartyFailure,
    PrivacyLeakWarning,
    ProtocolError,
    VFLError,
)
from vfl.net.messages import MAX_MESSAGE_BYTES
from vfl.protocols.policy import DEFAULT_MAX_DELTA as DEFAULT_PLAN_MAX_DELTA
from vfl.protocols.policy import DEFAULT_MAX_EPSILON as DEFAULT_PLAN_MAX_EPSILON
from vfl.protocols.policy import DEFAULT_MECHANISMS as DEFAULT_PLAN_MECHANISMS
from vfl.protocols.policy import SitePolicy
from vfl.protocols.settings import (
    ABORT_RULES,
    BCD_MECHANISMS,
    FM_MECHANISMS,
    GAUSSIAN_CALIBRATIONS,
    LAPLACE_VARIANTS,
    MODELS,
    NOISE_CALIBRATIONS,
    RANDOMNESS_MODES,
    REGULARIZATIONS,
)
from vfl.protocols.settings import MECHANISMS as VERTICAL_MECHANISMS
from vfl.secure.native import IMPLEMENTATION as INNER_LOOPS

__all__ = ["cli", "main", "exit_code_for"]

MECHANISMS = VERTICAL_MECHANISMS + ("cape-fm",)   # cape-fm: sites with disjoint rows (vfl.net.cape_cli)
TEST_NOISE_MODES = ("none", "zero-sum-only")
#: coordinator options of the vertical mechanisms that cape-fm refuses when given (instead of ignoring them)
VERTICAL_ONLY_OPTIONS = ("key_bits", "insecure_test_keys", "precision_bits", "fm_sensitivity", "gamma", "rounds",
                         "tol", "abort_rule", "noise_calibration", "seed", "randomness", "budget_split",
                         "regularization")


def _budget_split(value: str) -> str | float:
    """--budget-split: 'risk', 'equal' or a number (checked with the other FM options by RunSettings.validate)."""
    if value in ("risk", "equal"):
        return value
    try:
        return float(value)
    except ValueError:
        raise ConfigurationError(f"--budget-split must be risk, equal or a number in (0, 1), got {value!r}") from None


def exit_code_for(exc: BaseException) -> int:
    """Exit code of the CLI for an exception (see the module docstring)."""
    if isinstance(exc, (ConfigurationError, DataValidationError, BudgetError, click.UsageError)):
        return 2
    if isinstance(exc, PartyFailure):
        return 3
    if isinstance(exc, ProtocolError):
        return 4
    return 1


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    click.echo(f"vfl: warning: {message}", err=True)


def _echo(text: str) -> None:
    click.echo(text, err=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
             epilog=f"Secure-product inner loops: {INNER_LOOPS}.")
@click.version_option(package_name="vfl", message=f"%(prog)s %(version)s; inner loops: {INNER_LOOPS}")
def cli() -> None:
    """Differentially private linear/logistic regression on vertically partitioned data.

    Start one `vfl coordinator` and one `vfl party` per organisation; or try `vfl demo`.
    """


# ---------------------------------------------------------------------------------------------- coordinator
@cli.command()
@click.option("--parties", "-k", type=int, default=None,
              help="Number of parties K that must register (vertical mechanisms).")
@click.option("--sites", type=int, default=None,
              help="cape-fm: number of sites S (disjoint rows, same features) that must register with `vfl site`.")
@click.option("--colluding", type=int, default=None,
              help="cape-fm: sites S_C that may collude with the aggregator (default ceil(S/3) - 1); the noise is "
                   "calibrated so each site's (epsilon, delta) holds against them.")
@click.option("--site-weights", type=click.Choice(["rows", "equal"]), default="rows", show_default=True,
              help="cape-fm: weights of the sites' coefficients (rows: N_s/N).")
@click.option("--insecure-test-noise", type=click.Choice(TEST_NOISE_MODES), default=None,
              help="cape-fm TESTS ONLY: disable the noise (none) or the independent part (zero-sum-only); every "
                   "site must pass the same flag. The model is then not private.")
@click.option("--model", type=click.Choice(MODELS), default="linear", show_default=True,
              help="Regression model (logistic uses the order-2 Taylor objective).")
@click.option("--mechanism", type=click.Choice(MECHANISMS), default="gaussian-fm", show_default=True,
              help="Privacy mechanism: functional mechanisms, (DP-)BCD of de Jong et al. 2022, or cape-fm (sites "
                   "with disjoint rows, Tasnim et al. 2023; see docs/capefm.md).")
@click.option("--epsilon", type=float, default=None,
              help="Privacy budget epsilon (required unless none/bcd; cape-fm: per site).")
@click.option("--delta", type=float, default=1e-5, show_default=True,
              help="Privacy parameter delta (Gaussian mechanisms; cape-fm: per site).")
@click.option("--bind", default="tcp://127.0.0.1:5555", show_default=True,
              help="ZeroMQ endpoint to listen on (use tcp://0.0.0.0:PORT for other machines, with CURVE).")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for registrations, and the longest a party or site may stay silent (cape-fm: "
                   "a silent site aborts the run, no model written).")
@click.option("--max-run-time", type=float, default=86400.0, show_default=True,
              help="Seconds after which the whole run is aborted even if every party/site still sends heartbeats.")
@click.option("--out", type=click.Path(dir_okay=False), default="model.json", show_default=True,
              help="Where to write the model JSON (atomically; nothing is written on failure). Checked for "
                   "writability before the run; an existing file is refused unless --force.")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--key-bits", type=int, default=2048, show_default=True,
              help="Vertical mechanisms: Paillier modulus size for parties.")
@click.option("--insecure-test-keys", is_flag=True,
              help="Vertical mechanisms: allow keys below 2048 bits (tests only; every party must allow it too).")
@click.option("--precision-bits", type=int, default=None,
              help="Vertical mechanisms: fixed-point fractional bits of the secure products (default: vfl.secure's "
                   "default; cape-fm's secure aggregation always uses 40).")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="Enable CURVE: directory with coordinator.key_secret and the allowed parties' (or cape-fm "
                   "sites') *.key files.")
@click.option("--allow-plaintext-public", is_flag=True,
              help="Listen on a non-loopback --bind WITHOUT CURVE (refused otherwise: anyone who reaches the "
                   "interface could read and inject the run's messages). Only on a network you trust.")
@click.option("--calibration", type=click.Choice(GAUSSIAN_CALIBRATIONS), default=None,
              help="gaussian-fm and cape-fm noise calibration (paper: Tasnim et al.'s noise, true epsilon "
                   "reported; cape-fm takes analytic (default) or paper).")
@click.option("--budget-split", default=None,
              help="gaussian-fm: share of the Gaussian budget between the linear and quadratic terms: risk "
                   "(default, from d, N, epsilon, delta), equal, or the linear terms' share in (0, 1) "
                   "(docs/privacy.md, 'Budget split between the blocks').")
@click.option("--regularization", type=click.Choice(REGULARIZATIONS), default=None,
              help="FM solve: floor (the public eigenvalue floor alone) or adaptive (the floor plus shrinking the "
                   "released linear term by its signal-to-noise ratio; post-processing, no extra epsilon). Default: "
                   "adaptive for linear, floor for logistic (docs/privacy.md, 'Adaptive regularisation').")
@click.option("--fm-sensitivity", type=click.Choice(LAPLACE_VARIANTS), default=None,
              help="laplace-fm sensitivity variant (see docs/privacy.md).")
@click.option("--gamma", type=float, default=1.2, show_default=True,
              help="DP-BCD utility factor gamma (Alg. 2 of de Jong et al.).")
@click.option("--rounds", type=int, default=5, show_default=True,
              help="(DP-)BCD rounds T (the maximum when --tol is given; it fixes eps_r = epsilon/(K T)).")
@click.option("--tol", type=float, default=None,
              help="(DP-)BCD: stop after the first round with |RSS_{t-1} - RSS_t| / (|RSS_t| + 0.1) < TOL, checked by "
                   "the label owner (a data-dependent decision the DP-BCD accounting does not charge).")
@click.option("--abort-rule", type=click.Choice(ABORT_RULES), default="paper", show_default=True,
              help="DP-BCD utility check: paper = abort the run (Alg. 2); see docs/dp_bcd.md for the others.")
@click.option("--noise-calibration", type=click.Choice(NOISE_CALIBRATIONS), default="half-normal",
              show_default=True, help="DP-BCD noise sampler (see docs/dp_bcd.md).")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed for coordinator-side randomness (reproducible experiments only; reported). Not for "
                   "cape-fm, where each site draws its own noise: use `vfl site --seed`.")
@click.option("--max-message-bytes", type=int, default=MAX_MESSAGE_BYTES, show_default=True,
              help="Largest accepted frame/message; bigger ones are dropped and their sender disconnected.")
@click.option("--randomness", type=click.Choice(RANDOMNESS_MODES), default="short-exponent",
              show_default=True,
              help="Paillier encryption randomness: short-exponent (fast; adds a small-exponent discrete-log "
                   "assumption, see docs/secure_products.md) or standard (textbook r^n, ~4x slower).")
@click.option("--fit-intercept/--no-fit-intercept", default=True, show_default=True,
              help="FM runs: give the label owner (cape-fm: every site) a public constant column (an intercept); it "
                   "counts against the row-norm radius; --no-fit-intercept: no intercept at all (columns and label "
                   "mapped by x / max(|lo|, |hi|)). (DP-)BCD uses the data as given.")
@click.option("--min-rows", type=click.IntRange(min=1), default=1, show_default=True,
              help="Public minimum number of rows N (with --id: of row IDs common to all parties) below which the "
                   "run stops without a model.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the privacy report and the result line.")
@click.pass_context
def coordinator(ctx: click.Context, parties: int | None, sites: int | None, colluding: int | None, site_weights: str,
                insecure_test_noise: str | None, model: str, mechanism: str, epsilon: float | None, delta: float,
                bind: str, timeout: float, max_run_time: float, out: str, key_bits: int, insecure_test_keys: bool,
                precision_bits: int | None, curve_dir: str | None, calibration: str | None,
                budget_split: str | None, regularization: str | None, fm_sensitivity: str | None, gamma: float,
                rounds: int, tol: float | None,
                abort_rule: str,
                noise_calibration: str, seed: int | None, max_message_bytes: int, randomness: str,
                fit_intercept: bool, min_rows: int, quiet: bool, force: bool, allow_plaintext_public: bool) -> None:
    """Run the coordinator: wait for K parties (or S cape-fm sites), drive the protocol, write the model."""
    from vfl.net.coordinator import Coordinator, RunSettings
    from vfl.net.notices import check_bind
    from vfl.net.transport import load_server_keys

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public,
               role="capeFM aggregator" if mechanism == "cape-fm" else "coordinator")
    check_writable(out, force=force)

    if mechanism == "cape-fm":
        from vfl.net.cape_cli import run_cape_coordinator

        if parties is not None:
            raise ConfigurationError("cape-fm takes --sites S, not --parties")
        given = [f"--{n.replace('_', '-')}" for n in VERTICAL_ONLY_OPTIONS
                 if ctx.get_parameter_source(n) is click.core.ParameterSource.COMMANDLINE]
        if given:
            raise ConfigurationError(f"{', '.join(given)}: vertical mechanisms only, not --mechanism cape-fm (a "
                                     "site's noise seed is `vfl site --seed`)")
        run_cape_coordinator(sites=sites, colluding=colluding, weights=site_weights, noise=insecure_test_noise,
                             model=model, epsilon=epsilon, delta=delta, bind=bind, timeout=timeout,
                             max_run_time=max_run_time, out=out, curve_dir=curve_dir, calibration=calibration,
                             max_message_bytes=max_message_bytes, fit_intercept=fit_intercept, quiet=quiet, echo=_echo)
        return
    if sites is not None or colluding is not None or insecure_test_noise is not None:
        raise ConfigurationError("--sites, --colluding and --insecure-test-noise apply to --mechanism cape-fm only")
    if parties is None:
        raise ConfigurationError("Missing option '--parties' (the number of parties K; --mechanism cape-fm takes "
                                 "--sites S instead)")

    options = {}
    if calibration:
        options["calibration"] = calibration
    if fm_sensitivity:
        options["fm_sensitivity"] = fm_sensitivity
    if budget_split is not None:
        options["budget_split"] = _budget_split(budget_split)
    if mechanism in BCD_MECHANISMS:
        options.update(abort_rule=abort_rule, noise_calibration=noise_calibration)
    if mechanism in ("none", "bcd"):
        epsilon = None if mechanism == "bcd" else epsilon
    settings = RunSettings(n_parties=parties, model=model, mechanism=mechanism, epsilon=epsilon, delta=delta,
                           key_bits=key_bits, allow_insecure_keys=insecure_test_keys, precision_bits=precision_bits,
                           timeout=timeout, mechanism_options=options, gamma=gamma, rounds=rounds, tol=tol,
                           max_run_seconds=max_run_time, fit_intercept=fit_intercept, randomness=randomness,
                           min_rows=min_rows, regularization=regularization)
    curve = load_server_keys(curve_dir) if curve_dir else None
    log = (lambda s: None) if quiet else _echo
    coord = Coordinator(settings, bind, curve=curve, out=out, log=log, random_state=seed,
                        max_message_bytes=max_message_bytes)
    model_ = coord.run()
    if quiet:
        from vfl.net.modelio import report_text

        _echo(report_text(model_))
    _echo(f"model written to {out} (run {coord.run_id[:8]}; {len(model_.coef_)} coefficients; trained on "
          f"{model_.n_samples} rows)")


def _member_ledger_options(command: Callable) -> Callable:
    """``--ledger``, ``--budget``, ``--dataset-name``: a member's privacy ledger (``vfl party``, ``vfl site``,
    ``vfl djica-site``; vfl.privacy.budget_guard.BudgetGuard)."""
    options = [
        click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
                     help="This member's privacy ledger (SQLite): every run's spend per dataset. Default: "
                          "ledger-NAME.sqlite in $VFL_LEDGER or the user's data directory (~/.local/share/vfl)."),
        click.option("--budget", default=None, metavar="EPSILON[,DELTA]",
                     help="Lifetime privacy budget (delta default 1e-5): a plan whose spend, composed with the "
                          "ledger's history, would exceed it is refused when it arrives, before this member sends "
                          "anything for it (a refused plan costs nothing)."),
        click.option("--dataset-name", default=None,
                     help="Keep a separate budget for a separate dataset, declared by this name (recorded with its "
                          "files and columns). Default: one budget for every run of this member, whatever the rows, "
                          "bounds, label or --id subset."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


# ---------------------------------------------------------------------------------------------- party
@cli.command()
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
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="CURVE keys: directory with NAME.key_secret and coordinator.key.")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="Signing identities (`vfl keys`): this party's NAME.sign.secret and the pinned NAME.sign.pub of "
                   "every co-party it accepts. Every co-party's registration, roster entry and message is checked "
                   "against them; a plan with a party not pinned here is refused. Required unless "
                   "--insecure-no-identity.")
@click.option("--insecure-no-identity", is_flag=True,
              help="Run WITHOUT signing identities (loopback experiments only): a hostile coordinator could then "
                   "substitute keys, invent parties and forge responses. Warns, and the model's report says so.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Give up when the coordinator is silent this many seconds.")
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
                   "'none' and 'bcd' add no noise and 'dp-bcd' is never formally DP: they run only if listed here.")
@click.option("--min-epsilon", type=float, default=None,
              help="Refuse a plan whose epsilon is below this (default: no minimum).")
@click.option("--max-epsilon", type=float, default=DEFAULT_PLAN_MAX_EPSILON, show_default=True,
              help="Refuse a plan whose true epsilon (as this party's own privacy report computes it) exceeds this.")
@click.option("--max-delta", type=float, default=DEFAULT_PLAN_MAX_DELTA, show_default=True,
              help="Refuse a plan whose delta exceeds this.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local processes for encryption and secure products (default: all cores for big runs).")
@click.option("--executor", default=None, metavar="tcp://SCHEDULER:8786",
              help="Run this party's encryption and multi-exponentiations on its Dask cluster (pip install "
                   "'vfl[dask]'; the workers must run inside this party's trust domain).")
@click.option("--max-frame-bytes", type=click.IntRange(min=4096, max=64 * 2**20), default=None,
              help="Largest ciphertext frame this party sends (secure products are streamed in chunks of this size, "
                   "credit-based). Default: 4 MiB, or less if the coordinator's --max-message-bytes needs it.")
@click.option("--model-out", type=click.Path(dir_okay=False), default=None,
              help="Where to store the model every party signed at the end of an FM run (the file `vfl serve` "
                   "serves). Default: model-NAME-RUN.json next to this party's ledger.")
@_member_ledger_options
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
    from vfl.net.config import PartyConfig, check_row_alignment, load_party_config
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
    from vfl.net.party_data import load_party_data

    local = load_party_data(cfg, config)
    curve = load_client_keys(cfg.curve_dir, cfg.name) if cfg.curve_dir else None  # type: ignore[arg-type]
    node = PartyNode(local, cfg.connect, curve=curve, timeout=timeout, order=order,  # type: ignore[arg-type]
                     progress=progress, allow_insecure_keys=insecure_test_keys, log=_echo, random_state=seed,
                     policy=policy, workers=workers, executor=executor, max_frame_bytes=max_frame_bytes,
                     identity_dir=cfg.identity_dir, insecure_no_identity=insecure_no_identity,
                     allow_data_derived_bounds=allow_data_derived_bounds,
                     ledger=ledger, budget=lifetime, dataset_name=cfg.dataset_name, model_out=model_out,
                     dataset_files=[str(Path(cfg.data).resolve())] if cfg.data else [f"built-in:{cfg.dataset}"])
    _echo(f"[{cfg.name}] {local.n_rows} rows, {len(local.feature_names)} features"
          + (f", label {cfg.label}" if cfg.label else "") + f"; connecting to {cfg.connect}")
    model_ = node.run()
    _echo(f"[{cfg.name}] done: model released ({len(model_.coef_)} coefficients, mechanism {model_.mechanism})")


def _open_ledger(cfg: Any) -> tuple[Any, Any]:
    """The party's privacy ledger (checked: one line and exit 1 if unreadable or corrupted) and its budget."""
    return _open_member_ledger(cfg.name, cfg.ledger, cfg.budget)


def _open_member_ledger(name: str, ledger_path: str | None, budget: Any) -> tuple[Any, Any]:
    """A party's or site's privacy ledger (``--ledger``, default: that of NAME; checked: one line and exit 1 if
    unreadable or corrupted) and its lifetime budget (``--budget``, None: record only)."""
    from vfl.privacy.ledger import Budget, Ledger, default_ledger_path

    lifetime = Budget.parse(budget) if budget else None
    ledger = Ledger(ledger_path or default_ledger_path(name), party=name)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:   # a start that fails before the first reservation leaves no empty ledger file
        ctx.call_on_close(ledger.discard_if_unused)
    return ledger, lifetime


# ---------------------------------------------------------------------------------------------- budget
@cli.group()
def budget() -> None:
    """A party's privacy ledger: what each dataset has spent, its runs (docs/privacy.md)."""


def _ledger_options(command: Callable) -> Callable:
    options = [
        click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
                     help="The ledger file (default: that of --name in $VFL_LEDGER or the user's data directory)."),
        click.option("--name", default=None, help="The party whose default ledger to read."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _read_ledger(ledger_path: str | None, name: str | None) -> Any:
    from vfl.privacy.ledger import Ledger, default_ledger_path

    if not ledger_path and not name:
        raise ConfigurationError("give --ledger PATH or --name NAME (the party whose default ledger to read)")
    return Ledger(ledger_path or default_ledger_path(name), create=False)  # type: ignore[arg-type]


@budget.command("show")
@_ledger_options
@click.option("--budget", "lifetime", default=None, metavar="EPSILON[,DELTA]",
              help="Show what is left of this budget (default: the one in force at each dataset's latest run).")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def budget_show(ledger_path: str | None, name: str | None, lifetime: str | None, as_json: bool) -> None:
    """Per dataset: runs, composed spend, budget and what is left."""
    import json

    from vfl.privacy.ledger import Budget, summary_table

    ledger = _read_ledger(ledger_path, name)
    b = Budget.parse(lifetime) if lifetime else None
    _echo(json.dumps(ledger.summary(b), indent=2) if as_json else summary_table(ledger, b))


@budget.command("history")
@_ledger_options
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def budget_history(ledger_path: str | None, name: str | None, as_json: bool) -> None:
    """Every run, oldest first: when, dataset, mechanism, epsilon, delta, state, coordinator."""
    import json

    from vfl.privacy.ledger import history_table

    ledger = _read_ledger(ledger_path, name)
    _echo(json.dumps([r.to_dict() for r in ledger.runs()], indent=2) if as_json else history_table(ledger))


@budget.command("export")
@_ledger_options
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Write the JSON here (default: stdout).")
@click.option("--force", is_flag=True, help="Overwrite an existing --out file.")
def budget_export(ledger_path: str | None, name: str | None, out: str | None, force: bool) -> None:
    """The whole ledger as JSON: per dataset spent/left, every run, the integrity chain's head."""
    import json

    from vfl.privacy.ledger import export_document

    ledger = _read_ledger(ledger_path, name)
    text = json.dumps(export_document(ledger), indent=2)
    if out is None:
        _echo(text)
        return
    check_writable(out, force=force)
    Path(out).write_text(text + "\n", encoding="utf-8")


def _site_identity_options(command: Callable) -> Callable:
    """``--identity-dir`` and ``--insecure-no-identity`` of a CAPE site, as ``vfl party``'s (cape_keys)."""
    options = [
        click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
                     help="Signing identities (`vfl keys`): this site's NAME.sign.secret and the pinned NAME.sign.pub "
                          "of every co-site it accepts. The site signs its Diffie-Hellman values and masks its noise "
                          "share only under values signed by the pinned identities of the plan's sites for this run "
                          "and round; a plan with a site not pinned here is refused. Required unless "
                          "--insecure-no-identity."),
        click.option("--insecure-no-identity", is_flag=True,
                     help="Run WITHOUT signing identities (loopback experiments only): a hostile aggregator could "
                          "then substitute the co-sites' Diffie-Hellman values and unmask this site's noise share. "
                          "Warns, and the model's report says so."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _require_site_identity(name: str, identity_dir: str | None, insecure_no_identity: bool) -> None:
    """A site without --identity-dir refuses to start (before reading its data) unless --insecure-no-identity."""
    from vfl.net.site import require_site_identity

    require_site_identity(name, identity_dir, insecure_no_identity)


def _site_policy_options(command: Callable) -> Callable:
    """``--max-epsilon``, ``--max-delta``, ``--min-colluders``: what a CAPE site agrees to run (SitePolicy)."""
    options = [
        click.option("--max-epsilon", type=float, default=DEFAULT_PLAN_MAX_EPSILON, show_default=True,
                     help="Refuse a plan whose TRUE epsilon (all planned rounds; the paper calibration's larger "
                          "value) is above this, before anything is computed or released."),
        click.option("--max-delta", type=float, default=DEFAULT_PLAN_MAX_DELTA, show_default=True,
                     help="Refuse a plan whose delta is above this."),
        click.option("--min-colluders", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Refuse a plan whose noise withstands fewer colluding sites (S_C) than this."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


# ---------------------------------------------------------------------------------------------- site
@cli.command()
@click.option("--connect", required=True, help="Aggregator endpoint (`vfl coordinator --mechanism cape-fm`).")
@click.option("--name", required=True, help="This site's unique name.")
@click.option("--data", type=click.Path(dir_okay=False), required=True,
              help="CSV file with a header row: this site's rows (the same columns at every site).")
@click.option("--features", required=True,
              help="Feature columns: names, name ranges FIRST:LAST, or 0-based indices/ranges 2-5; comma separated.")
@click.option("--label", required=True, help="Label column (every site holds the label of its rows).")
@click.option("--bounds", type=click.Path(dir_okay=False), required=True,
              help="TOML '[bounds] column = [lo, hi]' of public feature (and label) bounds; the same file at every "
                   "site.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="CURVE keys: directory with NAME.key_secret and coordinator.key.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Give up when the aggregator is silent this many seconds.")
@click.option("--seed", type=int, default=None,
              help="Seed this site's noise (reproducible experiments only; the report flags seeded runs).")
@click.option("--insecure-test-noise", type=click.Choice(TEST_NOISE_MODES), default=None,
              help="TESTS ONLY: run without noise (none) or without the independent noise (zero-sum-only); the "
                   "aggregator must pass the same flag.")
@_site_identity_options
@_site_policy_options
@_member_ledger_options
def site(connect: str, name: str, data: str, features: str, label: str, bounds: str, curve_dir: str | None,
         timeout: float, seed: int | None, insecure_test_noise: str | None, identity_dir: str | None,
         insecure_no_identity: bool, max_epsilon: float, max_delta: float, min_colluders: int,
         ledger_path: str | None, budget: str | None, dataset_name: str | None) -> None:
    """Run one capeFM site: its rows, one CAPE round through the aggregator (docs/capefm.md).

    The model, epsilon, delta, S_C and calibration come from the aggregator's public plan; the site checks the
    plan against its own data and its policy (--max-epsilon, --max-delta, --min-colluders), prints the plan it
    accepted, and computes its own noise from it; then it reserves the plan's true spend in its privacy ledger
    (--ledger, --budget; docs/privacy.md) or refuses the plan before it sends anything. It signs its Diffie-Hellman
    value and masks its noise share only under the co-sites' values signed by their pinned identities
    (--identity-dir); anything else stops it (exit 4) before its masked share. A site that loses the aggregator,
    or gets ABORT because another site dropped out, exits with code 3 and releases nothing further.
    """
    from vfl.net.cape_cli import run_site

    _require_site_identity(name, identity_dir, insecure_no_identity)   # before the table is read
    ledger, lifetime = _open_member_ledger(name, ledger_path, budget)   # before the table is read
    run_site(connect=connect, name=name, data=data, features=features, label=label, bounds=bounds,
             curve_dir=curve_dir, timeout=timeout, seed=seed, noise=insecure_test_noise, echo=_echo,
             policy=SitePolicy(max_epsilon, max_delta, min_colluders), ledger=ledger, budget=lifetime,
             dataset_name=dataset_name, identity_dir=identity_dir, insecure_no_identity=insecure_no_identity)


# ---------------------------------------------------------------------------------------------- capeDJICA
@cli.command("djica-aggregator")
@click.option("--sites", type=int, required=True,
              help="Number of sites S (disjoint columns / time points, the same D rows) that must register with "
                   "`vfl djica-site`.")
@click.option("--components", "-K", type=int, required=True, help="Components K (capePCA subspace and ICA sources).")
@click.option("--epsilon", type=float, required=True,
              help="Per-site epsilon for the whole pipeline (the capePCA release plus every planned round).")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="Per-site delta for the whole pipeline.")
@click.option("--rounds", type=click.IntRange(1, 100_000), default=50, show_default=True,
              help="capeDJICA rounds J, at most 100000 (the budget is calibrated for J rounds; restarts count).")
@click.option("--learning-rate", type=float, default=1.0, show_default=True, help="Initial learning rate rho_0.")
@click.option("--pca-share", type=float, default=0.1, show_default=True,
              help="Share of the GDP budget mu^2 spent on the capePCA release (0 < share < 1).")
@click.option("--clip", type=float, default=2.0, show_default=True,
              help="Whitened columns are clipped to the public radius min(r, clip sqrt(K)).")
@click.option("--unit-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="Columns per protected unit (1: one time point, as Imtiaz et al. 2021; T: one subject's T time "
                   "points).")
@click.option("--colluding", type=int, default=None,
              help="Sites S_C that may collude with the aggregator (default ceil(S/3) - 1); noise is calibrated "
                   "against them.")
@click.option("--calibration", type=click.Choice(["analytic", "paper"]), default="analytic", show_default=True,
              help="CAPE calibration: corrected with kappa(S, S_C), or Imtiaz et al. 2021's Lemma 1 (true epsilon "
                   "reported; docs/capedjica.md).")
@click.option("--accountant", type=click.Choice(["gdp", "rdp", "moments", "strong"]), default="gdp",
              show_default=True, help="Accountant that calibrates the per-round noise (all are reported).")
@click.option("--anneal-deg", type=float, default=60.0, show_default=True,
              help="Anneal when consecutive updates differ by more than this angle (degrees).")
@click.option("--anneal-step", type=float, default=0.9, show_default=True, help="Annealing factor of rho.")
@click.option("--tol", type=float, default=1e-6, show_default=True, help="Stop when ||Delta W||_F^2 < tol.")
@click.option("--insecure-test-noise", type=click.Choice(["none"]), default=None,
              help="TESTS ONLY: run without noise (every site must pass the same flag).")
@click.option("--bind", default="tcp://127.0.0.1:5555", show_default=True, help="Endpoint to listen on.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for registrations, and the longest a site may stay silent.")
@click.option("--max-run-time", type=float, default=86400.0, show_default=True,
              help="Abort the run (no model) after this many seconds.")
@click.option("--out", type=click.Path(dir_okay=False), default="djica_model.json", show_default=True,
              help="Model JSON (written atomically: W, b, subspace, whitening, privacy report).")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="Enable CURVE: directory with coordinator.key_secret and the allowed sites' public keys.")
@click.option("--allow-plaintext-public", is_flag=True,
              help="Listen on a non-loopback --bind WITHOUT CURVE (refused otherwise). Only on a network you trust.")
@click.option("--max-message-bytes", type=int, default=MAX_MESSAGE_BYTES, show_default=True,
              help="Largest message accepted from a site, in [65536, 268435456]; a D (8 D^2 bytes) or "
                   "--rounds x --components (8 J (K^2 + K) bytes) whose messages exceed it is refused.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the privacy report and the result line.")
def djica_aggregator(sites: int, components: int, epsilon: float, delta: float, rounds: int, learning_rate: float,
                     pca_share: float, clip: float, unit_size: int, colluding: int | None, calibration: str,
                     accountant: str, anneal_deg: float, anneal_step: float, tol: float,
                     insecure_test_noise: str | None, bind: str, timeout: float, max_run_time: float, out: str,
                     force: bool, curve_dir: str | None, allow_plaintext_public: bool, max_message_bytes: int,
                     quiet: bool) -> None:
    """Run the capePCA + capeDJICA aggregator: S sites, one capePCA release, J CAPE rounds (docs/capedjica.md)."""
    from vfl.net.ica_cli import run_djica_aggregator
    from vfl.net.notices import check_bind

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public,
               role="capeDJICA aggregator")
    check_writable(out, force=force)
    run_djica_aggregator(sites=sites, components=components, epsilon=epsilon, delta=delta, rounds=rounds,
                         learning_rate=learning_rate, pca_share=pca_share, clip=clip, unit_size=unit_size,
                         colluding=colluding, calibration=calibration, accountant=accountant, anneal_deg=anneal_deg,
                         anneal_step=anneal_step, tol=tol, noise=insecure_test_noise, bind=bind, timeout=timeout,
                         max_run_time=max_run_time, out=out, curve_dir=curve_dir,
                         max_message_bytes=max_message_bytes, quiet=quiet, echo=_echo)


@cli.command("djica-site")
@click.option("--connect", required=True, help="Aggregator endpoint (`vfl djica-aggregator`).")
@click.option("--name", required=True, help="This site's unique name.")
@click.option("--data", type=click.Path(dir_okay=False), required=True,
              help="CSV (or Parquet) with a header: one row per time point, one column per dimension (D columns, "
                   "the same at every site).")
@click.option("--columns", default=None,
              help="Dimension columns: names, ranges FIRST:LAST or 0-based indices, comma separated (default: all).")
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="Public constant the data are divided by; every time point must then have ||x||_2 <= 1.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="CURVE keys: directory with NAME.key_secret and coordinator.key.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Give up when the aggregator is silent this many seconds.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed the noise (reproducible experiments only; every site given the same seed reproduces the "
                   "in-process fit; the report flags seeded runs).")
@click.option("--insecure-test-noise", type=click.Choice(["none"]), default=None,
              help="TESTS ONLY: run without noise; the aggregator must pass the same flag.")
@_site_identity_options
@_site_policy_options
@_member_ledger_options
def djica_site(connect: str, name: str, data: str, columns: str | None, scale: float, curve_dir: str | None,
               timeout: float, seed: int | None, insecure_test_noise: str | None, identity_dir: str | None,
               insecure_no_identity: bool, max_epsilon: float, max_delta: float, min_colluders: int,
               ledger_path: str | None, budget: str | None, dataset_name: str | None) -> None:
    """Run one capeDJICA site: its time points, the capePCA release and the CAPE rounds (docs/capedjica.md).

    The pipeline parameters come from the aggregator's public plan; the site checks the plan against its own data
    and its policy (--max-epsilon on the true epsilon of all planned rounds, --max-delta, --min-colluders), prints
    the plan it accepted, and computes its own noise; then it reserves the whole plan's true spend (the capePCA
    release and every planned round) in its privacy ledger (--ledger, --budget; docs/privacy.md) or refuses the
    plan before it sends anything. Its Diffie-Hellman values are signed and checked as `vfl site`'s
    (--identity-dir). A site that loses the aggregator, or gets ABORT, exits with code 3.
    """
    from vfl.net.ica_cli import run_djica_site

    _require_site_identity(name, identity_dir, insecure_no_identity)   # before the table is read
    ledger, lifetime = _open_member_ledger(name, ledger_path, budget)   # before the table is read
    run_djica_site(connect=connect, name=name, data=data, columns=columns, scale=scale, curve_dir=curve_dir,
                   timeout=timeout, seed=seed, noise=insecure_test_noise, echo=_echo,
                   policy=SitePolicy(max_epsilon, max_delta, min_colluders), ledger=ledger, budget=lifetime,
                   dataset_name=dataset_name, identity_dir=identity_dir, insecure_no_identity=insecure_no_identity)


# ---------------------------------------------------------------------------------------------- predict
@cli.command()
@click.option("--model", "model_path", type=click.Path(dir_okay=False), required=True,
              help="Model JSON written by `vfl coordinator`.")
@click.option("--data", type=click.Path(dir_okay=False), required=True,
              help="CSV (or Parquet) with the model's raw input columns by name (categorical columns as their raw "
                   "values: the model's recorded preprocessing is applied, docs/data_preparation.md).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Write predictions here (default stdout); an existing file is refused unless --force.")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--proba", is_flag=True, help="Logistic models: print P(y = 1) instead of the 0/1 label.")
@click.option("--id", "id_column", default=None,
              help="Pass this column (e.g. row IDs, any text) through as the first output column.")
@click.option("--output-column", default=None,
              help="Header of the prediction column (default: LABEL_predicted, or LABEL_probability with --proba).")
@click.option("--out-of-bounds", type=click.Choice(["refuse", "flag", "clip"]), default="refuse", show_default=True,
              help="Rows outside the model's public bounds: refuse the file, flag them (score as they are and add "
                   "an out_of_bounds column naming the columns), or clip them to the bounds.")
@click.option("--allow-unsigned-model", is_flag=True,
              help="INSECURE: use a model file that carries no party's signature (written before models were "
                   "signed, or by an --insecure-no-identity or (DP-)BCD run); warns loudly.")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="Pinned NAME.sign.pub of the parties (`vfl keys`): every party's signature must be under the key "
                   "pinned here (default: under the keys the model's roster records).")
def predict(model_path: str, data: str, out: str | None, proba: bool, force: bool, id_column: str | None,
            output_column: str | None, out_of_bounds: str, allow_unsigned_model: bool, identity_dir: str | None
            ) -> None:
    """Predict with a released model on a joined table of raw rows (a model every party of its roster signed)."""
    from vfl.net.model_signing import load_signed_model
    from vfl.net.modelio import atomic_write_text
    from vfl.net.predict import predict_file
    from vfl.secure.identity import load_pinned

    if out:
        check_writable(out, force=force)
    m = load_signed_model(model_path, allow_unsigned=allow_unsigned_model,
                          pinned=None if identity_dir is None else load_pinned(identity_dir))
    result = predict_file(m, data, id_column=id_column, column=output_column, proba=proba,
                          out_of_bounds=out_of_bounds)
    if result.unchecked:
        click.echo(f"vfl: note: the model records no public bounds for the columns of {', '.join(result.unchecked)} "
                   "((DP-)BCD uses the data as given): those columns are not checked", err=True)
    if result.n_outside:
        click.echo(f"vfl: warning: {result.n_outside} of {result.n_rows} rows lie outside the model's public bounds "
                   f"({'flagged in the out_of_bounds column' if out_of_bounds == 'flag' else 'clipped to them'})",
                   err=True)
    if out:
        atomic_write_text(out, result.text)
        _echo(f"{result.n_rows} predictions written to {out}")
    else:
        click.echo(result.text, nl=False)


# ---------------------------------------------------------------------------------------------- keys
@cli.command()
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Directory for the keys.")
@click.option("--names", multiple=True,
              help="Party names (comma separated or repeated) of a new folder; coordinator keys are always written.")
@click.option("--add", "add", multiple=True,
              help="Add these parties (comma separated or repeated) to an existing --out folder; no existing key is "
                   "touched (the others then only need the newcomers' public files, docs/deployment.md).")
@click.option("--bundle", "bundles", multiple=True,
              help="Copy what one organisation's machine needs into OUT/bundle-ORG (ORG: a party or coordinator; "
                   "comma separated or repeated): a party's own secrets, coordinator.key and every NAME.sign.pub; "
                   "the coordinator's secret and every NAME.key.")
def keys(out: str, names: tuple[str, ...], add: tuple[str, ...], bundles: tuple[str, ...]) -> None:
    """Write CURVE certificates (zmq.auth) for the coordinator and each party, and each party's Ed25519 signing
    identity (NAME.sign.secret, secret, mode 0600; NAME.sign.pub, public). Existing keys are never overwritten."""
    from vfl.net.keyfiles import add_parties, write_bundle, write_key_folder
    from vfl.net.messages import validate_name

    def split(items: tuple[str, ...]) -> list[str]:
        flat = [n.strip() for item in items for n in item.split(",") if n.strip()]
        try:
            for n in flat:
                validate_name(n)
        except ProtocolError as exc:
            raise ConfigurationError(str(exc)) from None
        return flat

    if names and add:
        raise ConfigurationError("--names makes a new key folder and --add adds parties to an existing one: give one")
    if not (names or add or bundles):
        raise ConfigurationError("give --names NAME[,NAME...] (a new folder), --add NAME (add parties to --out) or "
                                 "--bundle ORG")
    written = write_key_folder(out, split(names)) if names else add_parties(out, split(add)) if add else []
    for path in written:
        _echo(str(path))
    for org in split(bundles):
        _echo(f"{write_bundle(out, org)}: everything {org}'s machine needs, and no other organisation's secret")
    if add:
        _echo(f"send {', '.join(f'{n}.key' for n in split(add))} to the coordinator and the .sign.pub file(s) to every "
              "co-party; the secrets stay on this machine (docs/deployment.md)")
    elif written:
        _echo(f"give {Path(out) / 'coordinator.key'}, NAME.key_secret and NAME.sign.secret to each party; keep "
              "coordinator.key_secret and the parties' .key files at the coordinator; give every party the "
              "NAME.sign.pub of each co-party it accepts (its --identity-dir holds its own NAME.sign.secret and those "
              ".sign.pub files); `vfl keys --out DIR --bundle ORG` copies exactly one organisation's files")


# ---------------------------------------------------------------------------------------------- demo
@cli.command()
@click.option("--rows", type=int, default=1000, show_default=True, help="Rows of the synthetic data set.")
@click.option("--mechanism", type=click.Choice(FM_MECHANISMS), default="gaussian-fm", show_default=True,
              help="Mechanism to demonstrate.")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy budget epsilon.")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="Privacy parameter delta.")
@click.option("--key-bits", type=int, default=2048, show_default=True, help="Paillier key size.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the synthetic data (not the noise).")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Run timeout in seconds.")
@click.option("--out-dir", type=click.Path(file_okay=False), default=None,
              help="Write the demo's data, keys and model to this new or empty folder and keep them (default: a "
                   "temporary folder, removed at the end).")
def demo(rows: int, mechanism: str, epsilon: float, delta: float, key_bits: int, seed: int, timeout: float,
         out_dir: str | None) -> None:
    """Coordinator + two parties as local processes on a built-in synthetic data set."""
    from vfl.demo import run_demo

    run_demo(rows=rows, mechanism=mechanism, epsilon=epsilon, delta=delta, key_bits=key_bits, seed=seed,
             timeout=timeout, echo=_echo, workdir=out_dir)


# ---------------------------------------------------------------------------------------------- entry point
class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the coordinator sends ABORT, a party reports to the coordinator."""


def _add_scoring_commands() -> None:
    """``vfl score`` and ``vfl serve`` (federated scoring, issue 22) live in :mod:`vfl.cli_scoring`."""
    from vfl.cli_check import check  # `vfl check`: the preflight of one role (issue 32)
    from vfl.cli_scoring import score, serve

    cli.add_command(score)
    cli.add_command(serve)
    cli.add_command(check)


_add_scoring_commands()


def _add_report_commands() -> None:
    """``vfl plan`` and ``vfl report`` (issue 31) live in :mod:`vfl.cli_report`."""
    from vfl.cli_report import plan, report

    cli.add_command(plan)
    cli.add_command(report)


_add_report_commands()


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated("terminated by SIGTERM")


def _end_children() -> None:
    """Kill this process's pool workers (they would also die with it: vfl.secure.fastmath.die_with_parent)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one readable line and a non-zero exit code on every user error."""
    import signal
    import threading

    from vfl.net.process_memory import limit_malloc_arenas

    limit_malloc_arenas()   # before any thread: freed frame memory is reused, not kept per thread (issue 8)
    warnings.showwarning = _show_warning
    warnings.simplefilter("always", PrivacyLeakWarning)
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="vfl", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort as exc:  # click wraps KeyboardInterrupt (and our SIGTERM) in Abort
        _end_children()
        cause = exc.__cause__ or exc.__context__
        click.echo(f"vfl: {'terminated' if isinstance(cause, Terminated) else 'interrupted'}", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"vfl: error: {exc.format_message()}", err=True)
        return exc.exit_code if exc.exit_code else 2
    except VFLError as exc:
        click.echo(f"vfl: error: {exc}", err=True)
        return exit_code_for(exc)
    except KeyboardInterrupt as exc:
        _end_children()
        click.echo(f"vfl: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
