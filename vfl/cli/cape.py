"""The CAPE commands (sites with disjoint rows or columns): ``vfl aggregator`` and ``vfl site``
(capeFM), ``vfl djica-aggregator`` and ``vfl djica-site``; the runs themselves are :mod:`vfl.cli.cape_run`
and :mod:`vfl.cli.ica_run`."""

from __future__ import annotations

import click

from vfl.cli.options import (
    TEST_NOISE_MODES,
    echo,
    hub_options,
    member_ledger_options,
    member_link_options,
    open_member_ledger,
    require_site_identity,
    site_identity_options,
    site_policy_options,
)
from vfl.data.files import check_writable
from vfl.net.messages import MAX_MESSAGE_BYTES
from vfl.protocols.policy import SitePolicy
from vfl.protocols.settings import GAUSSIAN_CALIBRATIONS, MODELS

__all__ = ["aggregator", "site", "djica_aggregator", "djica_site"]


# ---------------------------------------------------------------------------------------------- site
@click.command()
@click.option("--connect", required=True, help="Aggregator endpoint (`vfl aggregator`; older spelling: "
                   "`vfl coordinator --mechanism cape-fm`).")
@click.option("--name", required=True, help="This site's unique name.")
@click.option("--data", type=click.Path(dir_okay=False), required=True,
              help="CSV file with a header row: this site's rows (the same columns at every site).")
@click.option("--features", required=True,
              help="Feature columns: names, name ranges FIRST:LAST, or 0-based indices/ranges 2-5; comma separated.")
@click.option("--label", required=True, help="Label column (every site holds the label of its rows).")
@click.option("--bounds", type=click.Path(dir_okay=False), required=True,
              help="TOML '[bounds] column = [lo, hi]' of public feature (and label) bounds; the same file at every "
                   "site.")
@click.option("--seed", type=int, default=None,
              help="Seed this site's noise (reproducible experiments only; the report flags seeded runs).")
@click.option("--insecure-test-noise", type=click.Choice(TEST_NOISE_MODES), default=None,
              help="TESTS ONLY: run without noise (none) or without the independent noise (zero-sum-only); the "
                   "aggregator must pass the same flag.")
@site_identity_options
@site_policy_options
@member_ledger_options
@member_link_options(hub="aggregator")
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
    from vfl.cli.cape_run import run_site

    require_site_identity(name, identity_dir, insecure_no_identity)   # before the table is read
    ledger, lifetime = open_member_ledger(name, ledger_path, budget)   # before the table is read
    run_site(connect=connect, name=name, data=data, features=features, label=label, bounds=bounds,
             curve_dir=curve_dir, timeout=timeout, seed=seed, noise=insecure_test_noise, echo=echo,
             policy=SitePolicy(max_epsilon, max_delta, min_colluders), ledger=ledger, budget=lifetime,
             dataset_name=dataset_name, identity_dir=identity_dir, insecure_no_identity=insecure_no_identity)


# ---------------------------------------------------------------------------------------------- capeDJICA
@click.command("djica-aggregator")
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
@click.option("--out", type=click.Path(dir_okay=False), default="djica_model.json", show_default=True,
              help="Model JSON (written atomically: W, b, subspace, whitening, privacy report).")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--max-message-bytes", type=int, default=MAX_MESSAGE_BYTES, show_default=True,
              help="Largest message accepted from a site, in [65536, 268435456]; a D (8 D^2 bytes) or "
                   "--rounds x --components (8 J (K^2 + K) bytes) whose messages exceed it is refused.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the privacy report and the result line.")
@hub_options(members="sites", member="site")
def djica_aggregator(sites: int, components: int, epsilon: float, delta: float, rounds: int, learning_rate: float,
                     pca_share: float, clip: float, unit_size: int, colluding: int | None, calibration: str,
                     accountant: str, anneal_deg: float, anneal_step: float, tol: float,
                     insecure_test_noise: str | None, bind: str, timeout: float, max_run_time: float, out: str,
                     force: bool, curve_dir: str | None, allow_plaintext_public: bool, max_message_bytes: int,
                     quiet: bool) -> None:
    """Run the capePCA + capeDJICA aggregator: S sites, one capePCA release, J CAPE rounds (docs/capedjica.md)."""
    from vfl.cli.ica_run import run_djica_aggregator
    from vfl.net.notices import check_bind

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public,
               role="capeDJICA aggregator")
    check_writable(out, force=force)
    run_djica_aggregator(sites=sites, components=components, epsilon=epsilon, delta=delta, rounds=rounds,
                         learning_rate=learning_rate, pca_share=pca_share, clip=clip, unit_size=unit_size,
                         colluding=colluding, calibration=calibration, accountant=accountant, anneal_deg=anneal_deg,
                         anneal_step=anneal_step, tol=tol, noise=insecure_test_noise, bind=bind, timeout=timeout,
                         max_run_time=max_run_time, out=out, curve_dir=curve_dir,
                         max_message_bytes=max_message_bytes, quiet=quiet, echo=echo)


@click.command("djica-site")
@click.option("--connect", required=True, help="Aggregator endpoint (`vfl djica-aggregator`).")
@click.option("--name", required=True, help="This site's unique name.")
@click.option("--data", type=click.Path(dir_okay=False), required=True,
              help="CSV (or Parquet) with a header: one row per time point, one column per dimension (D columns, "
                   "the same at every site).")
@click.option("--columns", default=None,
              help="Dimension columns: names, ranges FIRST:LAST or 0-based indices, comma separated (default: all).")
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="Public constant the data are divided by; every time point must then have ||x||_2 <= 1.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed the noise (reproducible experiments only; every site given the same seed reproduces the "
                   "in-process fit; the report flags seeded runs).")
@click.option("--insecure-test-noise", type=click.Choice(["none"]), default=None,
              help="TESTS ONLY: run without noise; the aggregator must pass the same flag.")
@site_identity_options
@site_policy_options
@member_ledger_options
@member_link_options(hub="aggregator")
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
    from vfl.cli.ica_run import run_djica_site

    require_site_identity(name, identity_dir, insecure_no_identity)   # before the table is read
    ledger, lifetime = open_member_ledger(name, ledger_path, budget)   # before the table is read
    run_djica_site(connect=connect, name=name, data=data, columns=columns, scale=scale, curve_dir=curve_dir,
                   timeout=timeout, seed=seed, noise=insecure_test_noise, echo=echo,
                   policy=SitePolicy(max_epsilon, max_delta, min_colluders), ledger=ledger, budget=lifetime,
                   dataset_name=dataset_name, identity_dir=identity_dir, insecure_no_identity=insecure_no_identity)


# ---------------------------------------------------------------------------------------------- capeFM aggregator
@click.command()
@click.option("--sites", type=int, required=True,
              help="Number of sites S (disjoint rows, same features) that must register with `vfl site`.")
@click.option("--colluding", type=int, default=None,
              help="Sites S_C that may collude with the aggregator (default ceil(S/3) - 1); the noise is calibrated "
                   "so each site's (epsilon, delta) holds against them.")
@click.option("--site-weights", type=click.Choice(["rows", "equal"]), default="rows", show_default=True,
              help="Weights of the sites' coefficients (rows: N_s/N).")
@click.option("--insecure-test-noise", type=click.Choice(TEST_NOISE_MODES), default=None,
              help="TESTS ONLY: disable the noise (none) or the independent part (zero-sum-only); every site must "
                   "pass the same flag. The model is then not private.")
@click.option("--model", type=click.Choice(MODELS), default="linear", show_default=True,
              help="Regression model (logistic uses the order-2 Taylor objective).")
@click.option("--epsilon", type=float, default=None, help="Privacy budget epsilon of each site.")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="Privacy parameter delta of each site.")
@click.option("--out", type=click.Path(dir_okay=False), default="model.json", show_default=True,
              help="Where to write the model JSON (atomically; nothing is written on failure). Checked for "
                   "writability before the run; an existing file is refused unless --force.")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--calibration", type=click.Choice(GAUSSIAN_CALIBRATIONS), default=None,
              help="Noise calibration: analytic (default) or paper (Tasnim et al.'s noise, true epsilon reported).")
@click.option("--max-message-bytes", type=int, default=MAX_MESSAGE_BYTES, show_default=True,
              help="Largest accepted frame/message; bigger ones are dropped and their sender disconnected.")
@click.option("--fit-intercept/--no-fit-intercept", default=True, show_default=True,
              help="Give every site a public constant column (an intercept); it counts against the row-norm radius; "
                   "--no-fit-intercept: no intercept at all (columns and label mapped by x / max(|lo|, |hi|)).")
@click.option("--quiet", "-q", is_flag=True, help="Print only the privacy report and the result line.")
@hub_options(members="sites", member="site")
def aggregator(sites: int, colluding: int | None, site_weights: str, insecure_test_noise: str | None, model: str,
               epsilon: float | None, delta: float, bind: str, timeout: float, max_run_time: float, out: str,
               force: bool, curve_dir: str | None, allow_plaintext_public: bool, calibration: str | None,
               max_message_bytes: int, fit_intercept: bool, quiet: bool) -> None:
    """Run the capeFM aggregator: wait for S sites with disjoint rows, one CAPE round, write the model.

    The hub of `vfl site` (docs/capefm.md); `vfl coordinator --mechanism cape-fm --sites S` is the older spelling
    of this command and runs the same aggregator.
    """
    from vfl.cli.cape_run import run_cape_coordinator
    from vfl.net.notices import check_bind

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public, role="capeFM aggregator")
    check_writable(out, force=force)
    run_cape_coordinator(sites=sites, colluding=colluding, weights=site_weights, noise=insecure_test_noise,
                         model=model, epsilon=epsilon, delta=delta, bind=bind, timeout=timeout,
                         max_run_time=max_run_time, out=out, curve_dir=curve_dir, calibration=calibration,
                         max_message_bytes=max_message_bytes, fit_intercept=fit_intercept, quiet=quiet, echo=echo)
