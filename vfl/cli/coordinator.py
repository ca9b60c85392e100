"""``vfl coordinator``: the hub of the vertical mechanisms (and, as an alias of ``vfl aggregator``, of capeFM)."""

from __future__ import annotations

import click

from vfl.cli.options import TEST_NOISE_MODES, echo, hub_options
from vfl.data.files import check_writable
from vfl.exceptions import ConfigurationError
from vfl.net.messages import MAX_MESSAGE_BYTES
from vfl.privacy.gradient_release import DEFAULT_RADIUS, DEFAULT_STEPS
from vfl.protocols.settings import (
    ABORT_RULES,
    BCD_MECHANISMS,
    GAUSSIAN_CALIBRATIONS,
    LAPLACE_VARIANTS,
    MODELS,
    NOISE_CALIBRATIONS,
    RANDOMNESS_MODES,
    REGULARIZATIONS,
)
from vfl.protocols.settings import MECHANISMS as VERTICAL_MECHANISMS

__all__ = ["coordinator", "MECHANISMS", "VERTICAL_ONLY_OPTIONS"]


MECHANISMS = VERTICAL_MECHANISMS + ("cape-fm",)   # cape-fm: sites with disjoint rows (vfl.cli.cape_run)
#: coordinator options of the vertical mechanisms that cape-fm refuses when given (instead of ignoring them)
VERTICAL_ONLY_OPTIONS = ("key_bits", "insecure_test_keys", "precision_bits", "fm_sensitivity", "gamma", "rounds",
                         "tol", "abort_rule", "noise_calibration", "seed", "randomness", "budget_split",
                         "regularization", "release_beta", "steps", "iterate_radius", "learning_rate")
#: the options of --mechanism noisy-gd (refused with any other mechanism instead of ignored)
GD_OPTION_FLAGS = {"steps": "--steps", "iterate_radius": "--iterate-radius", "learning_rate": "--learning-rate"}


def _budget_split(value: str) -> str | float:
    """--budget-split: 'risk', 'equal' or a number (checked with the other FM options by RunSettings.validate)."""
    if value in ("risk", "equal"):
        return value
    try:
        return float(value)
    except ValueError:
        raise ConfigurationError(f"--budget-split must be risk, equal or a number in (0, 1), got {value!r}") from None


# ---------------------------------------------------------------------------------------------- coordinator
@click.command()
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
@click.option("--steps", type=int, default=None,
              help=f"noisy-gd: gradient rounds T (default {DEFAULT_STEPS}); the noise per round grows as sqrt(T) "
                   "for the same epsilon (docs/privacy.md).")
@click.option("--iterate-radius", type=float, default=None,
              help=f"noisy-gd: public radius R of the ball every iterate is projected on (default {DEFAULT_RADIUS:g}, "
                   "in the l2 domain's units); the per-round sensitivity (2R + 4)/N linear, (R/4 + 1)/N logistic.")
@click.option("--learning-rate", type=float, default=None,
              help="noisy-gd: public step size eta (default 1/L: 0.5 linear, 4 logistic); any eta > 0 keeps the "
                   "privacy guarantee (the iterates are post-processing).")
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
@click.option("--release-beta", is_flag=True,
              help="Linear FM: the label owner also releases the constant beta = (1/N) y'y with calibrated noise "
                   "(same total epsilon; the budget is split over one more block, so alpha and M get more noise), "
                   "so the model file carries R^2 and MSE with intervals and tighter coefficient intervals. "
                   "On by itself with --calibration paper.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the privacy report and the result line.")
@hub_options(members="parties (or cape-fm sites)", member="party or site")
@click.pass_context
def coordinator(ctx: click.Context, parties: int | None, sites: int | None, colluding: int | None, site_weights: str,
                insecure_test_noise: str | None, model: str, mechanism: str, epsilon: float | None, delta: float,
                bind: str, timeout: float, max_run_time: float, out: str, key_bits: int, insecure_test_keys: bool,
                precision_bits: int | None, curve_dir: str | None, calibration: str | None,
                budget_split: str | None, regularization: str | None, fm_sensitivity: str | None, gamma: float,
                rounds: int, steps: int | None, iterate_radius: float | None, learning_rate: float | None,
                tol: float | None, abort_rule: str,
                noise_calibration: str, seed: int | None, max_message_bytes: int, randomness: str,
                fit_intercept: bool, min_rows: int, release_beta: bool, quiet: bool, force: bool,
                allow_plaintext_public: bool) -> None:
    """Run the coordinator: wait for K parties (or S cape-fm sites), drive the protocol, write the model."""
    from vfl.net.coordinator import Coordinator, RunSettings
    from vfl.net.notices import check_bind
    from vfl.net.transport import load_server_keys

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public,
               role="capeFM aggregator" if mechanism == "cape-fm" else "coordinator")
    check_writable(out, force=force)

    if mechanism == "cape-fm":
        from vfl.cli.cape_run import run_cape_coordinator

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
                             max_message_bytes=max_message_bytes, fit_intercept=fit_intercept, quiet=quiet, echo=echo)
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
    gd_given = {k: v for k, v in (("steps", steps), ("iterate_radius", iterate_radius),
                                  ("learning_rate", learning_rate)) if v is not None}
    if gd_given and mechanism != "noisy-gd":
        raise ConfigurationError(f"{', '.join(GD_OPTION_FLAGS[k] for k in gd_given)}: --mechanism noisy-gd only")
    options.update(gd_given)
    if mechanism in ("none", "bcd"):
        epsilon = None if mechanism == "bcd" else epsilon
    settings = RunSettings(n_parties=parties, model=model, mechanism=mechanism, epsilon=epsilon, delta=delta,
                           key_bits=key_bits, allow_insecure_keys=insecure_test_keys, precision_bits=precision_bits,
                           timeout=timeout, mechanism_options=options, gamma=gamma, rounds=rounds, tol=tol,
                           max_run_seconds=max_run_time, fit_intercept=fit_intercept, randomness=randomness,
                           min_rows=min_rows, regularization=regularization, release_beta=release_beta)
    curve = load_server_keys(curve_dir) if curve_dir else None
    log = (lambda s: None) if quiet else echo
    coord = Coordinator(settings, bind, curve=curve, out=out, log=log, random_state=seed,
                        max_message_bytes=max_message_bytes)
    model_ = coord.run()
    if quiet:
        from vfl.models.modelio import report_text

        echo(report_text(model_))
    echo(f"model written to {out} (run {coord.run_id[:8]}; {len(model_.coef_)} coefficients; trained on "
          f"{model_.n_samples} rows)")
