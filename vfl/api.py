"""Python API: describe each party's columns, call :func:`fit`, get a model trained by the real protocol.

``fit`` starts a :class:`~vfl.net.coordinator.Coordinator` on a free loopback port and one
:class:`~vfl.net.party.PartyNode` thread per party; they talk over real ZeroMQ sockets with real Paillier
keys exactly as separate processes would (the CLI runs the same classes in separate processes), and with
throwaway Ed25519 identities that every party pins, so the signed roster is checked as in a deployment. For
roles in separate scripts use ``Coordinator`` and ``PartyNode`` directly.

Example::

    import vfl
    alice = vfl.Party("alice", X_a, y, bounds=[(-3, 3)] * X_a.shape[1], label_bounds=(-10, 10))
    bob = vfl.Party("bob", X_b, bounds=[(0, 1)] * X_b.shape[1])
    model = vfl.fit([alice, bob], model="linear", mechanism="gaussian-fm", epsilon=1.0, delta=1e-5)
    model.coef_, model.predict([X_a, X_b]), print(model.privacy_report_)
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, PartyFailure
from vfl.models.modelio import FittedModel
from vfl.net.coordinator import BCD_MECHANISMS, Coordinator, RunSettings
from vfl.net.party import PartyNode
from vfl.protocols.local_data import LocalData, check_declared_bounds
from vfl.protocols.policy import PartyPolicy, SitePolicy
from vfl.rng import RandomState
from vfl.secure.identity import write_identities

__all__ = ["Party", "fit", "Site", "fit_sites", "fit_ica_sites"]

BOUNDS_OPT_IN = "vfl.Party(..., allow_data_derived_bounds=True)"


class Party:
    """One organisation's columns: ``X`` (rows aligned across parties, or aligned by ``ids``), optional label ``y``.

    ``bounds``: public per-column bounds (one (lo, hi) pair, a list of pairs, or a dict by feature name);
    ``label_bounds``: public (lo, hi) of y for linear regression. Private by default (issue 21): :func:`fit` with a
    mechanism whose guarantee rests on them (laplace-fm, gaussian-fm, relaxed-fm) refuses a party without them unless
    it passes ``allow_data_derived_bounds=True`` (bounds from its data's min/max, a
    :class:`~vfl.exceptions.DataBoundsWarning`, and the report says formal DP: no). ``ids``: one row ID per row (any
    order; strings after ``str()``, normalised as in docs/psi.md): the parties first run a private set intersection
    of their IDs and train on the rows common to all of them (every party must give ``ids``, or none). Without
    ``ids`` rows are paired by position; unlike ``vfl party`` (which then needs its operator's ``--rows-aligned``),
    no statement is asked for here: the one caller of :func:`fit` passes every party's arrays and aligned them.
    """

    def __init__(self, name: str, X: Any, y: Any = None, feature_names: Sequence[str] | None = None,
                 bounds: Any = None, label_bounds: Sequence[float] | None = None,
                 ids: Sequence[Any] | None = None, *, allow_data_derived_bounds: bool = False) -> None:
        X = np.asarray(X, dtype=float)
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        self.name = name
        self.X = X
        self.y = None if y is None else np.asarray(y, dtype=float)
        self.feature_names = list(feature_names) if feature_names is not None else None
        self.bounds = bounds
        self.label_bounds = label_bounds
        self.ids = None if ids is None else list(ids)
        self.allow_data_derived_bounds = bool(allow_data_derived_bounds)

    def local_data(self, *, use_bounds: bool = True) -> LocalData:
        return LocalData.build(self.name, self.X, self.y, feature_names=self.feature_names, bounds=self.bounds,
                               label_bounds=self.label_bounds, ids=self.ids, use_bounds=use_bounds)


def fit(parties: Sequence[Party], model: str = "linear", mechanism: str = "gaussian-fm", epsilon: float | None = 1.0,
        delta: float | None = 1e-5, *, random_state: RandomState = None, key_bits: int = 2048,
        allow_insecure_keys: bool = False, timeout: float = 120.0, precision_bits: int | None = None,
        lambda_floor: float | None = None, regularization: str | None = None, gamma: float = 1.2, rounds: int = 5,
        tol: float | None = None, max_run_seconds: float | None = 86400.0, fit_intercept: bool = True,
        randomness: str = "short-exponent", min_rows: int = 1, release_beta: bool = False, out: str | None = None,
        progress: bool = False, verbose: bool = False, bind: str = "tcp://127.0.0.1:0",
        **mechanism_options: Any) -> FittedModel:
    """Train over the real networked protocol on loopback; returns the released :class:`FittedModel`.

    ``coef_`` follows the order of ``parties`` (each party's columns in its own order). ``random_state``
    seeds every party's noise (reproducible experiments only: reports flag it). ``key_bits < 2048``
    needs ``allow_insecure_keys=True`` (tests). ``fit_intercept`` (FM runs) gives the label owner a public
    constant column, which counts against its row-norm radius. ``randomness="standard"`` uses textbook
    Paillier encryption randomness instead of the faster short-exponent variant. ``regularization`` ("floor" or
    "adaptive"; None: the model's default) is the FM solve's, as in :class:`vfl.LinearRegression`.
    ``mechanism_options`` go to the mechanism (e.g. ``calibration="paper"``, ``fm_sensitivity="tight"``,
    ``domain="l2"``). (DP-)BCD: ``rounds`` is the maximum T (it fixes eps_r = eps/(kT)); ``tol`` stops earlier by
    the rule of :func:`vfl.models.bcd.run_bcd`. ``mechanism="noisy-gd"`` (exactly two parties): T noisy gradient
    rounds across the parties (:mod:`vfl.protocols.gd_phase`), options ``steps``, ``iterate_radius`` and
    ``learning_rate``; every party signs its model after replaying the rounds (:mod:`vfl.net.round_check`).
    ``timeout`` bounds each party's silence, ``max_run_seconds`` the whole run. ``min_rows``: public minimum N
    (after the row alignment when the parties give ``ids``) below which the run stops. ``release_beta`` (linear
    FM): the label owner also releases beta = (1/N) y'y with calibrated noise, as :class:`vfl.LinearRegression`
    does with ``release_beta=True`` (same epsilon, one more block sharing it), so the inference record carries R^2
    and MSE; ``calibration="paper"`` releases it anyway.
    """
    if not parties:
        raise ConfigurationError("fit needs at least one Party")
    settings = RunSettings(n_parties=len(parties), model=model, mechanism=mechanism, epsilon=epsilon, delta=delta,
                           key_bits=key_bits, allow_insecure_keys=allow_insecure_keys, precision_bits=precision_bits,
                           timeout=timeout, mechanism_options=dict(mechanism_options), lambda_floor=lambda_floor,
                           regularization=regularization,
                           gamma=gamma, rounds=rounds, tol=tol, max_run_seconds=max_run_seconds,
                           fit_intercept=fit_intercept, randomness=randomness, min_rows=min_rows,
                           release_beta=release_beta)
    settings.validate()
    fm = mechanism not in BCD_MECHANISMS
    datas = [p.local_data(use_bounds=fm) for p in parties]
    policy = PartyPolicy.permissive(frozenset({mechanism}))   # one caller chose every party's plan in-process
    for p, d in zip(parties, datas, strict=True):   # private by default: declared bounds, or the party's opt-in
        check_declared_bounds(d, policy, allow=p.allow_data_derived_bounds, model=model, flag=BOUNDS_OPT_IN,
                              how="bounds=[(lo, hi), ...] for every column and label_bounds=(lo, hi) for a linear "
                                  "model's label")
    if random_state is None:
        seeds: list[Any] = [None] * len(parties)
    elif not fm:
        from vfl.models.bcd import party_generators

        # party i uses item i, exactly as vfl.models.bcd.run_dp_bcd(..., random_state=random_state) does
        seeds = [*party_generators(random_state, len(parties)), np.random.default_rng(0)]
    else:
        seq = np.random.SeedSequence(random_state if isinstance(random_state, int) else
                                     int(np.random.default_rng(random_state).integers(2**63)))
        seeds = [np.random.default_rng(s) for s in seq.spawn(len(parties) + 1)]
    log = print if verbose else None
    # throwaway signing identities, pinned by every party (vfl.protocols.roster): the same checks as a deployment
    with tempfile.TemporaryDirectory(prefix="vfl-identities-") as identities:
        write_identities(identities, [d.name for d in datas])
        coordinator = Coordinator(settings, bind, out=out, log=log,
                                  random_state=seeds[-1] if random_state is not None else None)
        nodes = {d.name: PartyNode(d, coordinator.endpoint, timeout=timeout, order=i,
                                   random_state=seeds[i] if random_state is not None else None, progress=progress,
                                   allow_insecure_keys=allow_insecure_keys, identity_dir=identities,
                                   policy=policy, allow_data_derived_bounds=None)   # bounds checked above
                 for i, d in enumerate(datas)}
        return _run_on_loopback(coordinator.run, nodes)


def _run_on_loopback(run_hub: Callable[[], FittedModel], nodes: dict[str, Any]) -> FittedModel:
    """Run every member node (party or site) on its own thread and the hub (coordinator or aggregator) here.

    When the hub fails because a member did, the member's own error is raised (it names the real cause); each node
    reports its failure to the hub itself.
    """
    errors: dict[str, BaseException] = {}

    def run_member(name: str) -> None:
        try:
            nodes[name].run()
        except BaseException as exc:  # reported to the hub by the node itself
            errors[name] = exc

    threads = [threading.Thread(target=run_member, args=(name,), daemon=True, name=f"vfl-{name}") for name in nodes]
    for t in threads:
        t.start()
    try:
        return run_hub()
    except PartyFailure as exc:
        for t in threads:   # a member reports its failure to the hub before its thread records it here
            t.join(timeout=10)
        first = next((e for e in errors.values() if not isinstance(e, PartyFailure)), None)
        if first is not None:
            raise first from exc
        raise
    finally:
        for t in threads:
            t.join(timeout=10)


# ---------------------------------------------------------------------------------------------- capeFM sites
class Site:
    """One organisation's *rows* for capeFM (horizontal partition: every site has the same features and the label).

    ``bounds``: the public per-feature bounds, identical at every site (one pair, a list of pairs or a dict by
    feature name; required). ``label_bounds``: public (lo, hi) of y (linear regression).
    """

    def __init__(self, name: str, X: Any, y: Any, feature_names: Sequence[str] | None = None, bounds: Any = None,
                 label_bounds: Sequence[float] | None = None) -> None:
        from vfl.net.site import SiteData

        self.name = name
        self.data = SiteData.build(name, X, y, feature_names=feature_names, bounds=bounds, label_bounds=label_bounds)


def fit_sites(sites: Sequence[Site], model: str = "linear", epsilon: float = 1.0, delta: float = 1e-5, *,
              n_colluders: int | None = None, calibration: str = "analytic", weights: str = "rows",
              fit_intercept: bool = True, lambda_floor: float | None = None, random_state: RandomState = None,
              timeout: float = 120.0, max_run_seconds: float | None = 86400.0, out: str | None = None,
              verbose: bool = False, bind: str = "tcp://127.0.0.1:0", insecure_test_noise: str | None = None
              ) -> FittedModel:
    """Train capeFM over the real networked protocol on loopback (one aggregator, one thread per site).

    Same protocol and messages as ``vfl coordinator --mechanism cape-fm`` with ``vfl site`` processes
    (docs/capefm.md): pairwise-masked secure aggregation of the zero-sum noise through the aggregator, independent
    noise, weighted combination, projection, solve. ``epsilon``/``delta`` hold per site against the aggregator plus
    ``n_colluders`` sites (default ceil(S/3) - 1). ``random_state`` seeds the sites' noise (experiments only; then
    the coefficients equal :class:`vfl.CapeFM` with the same seed on the prepared rows, sites in name order).
    ``insecure_test_noise`` ("none" or "zero-sum-only") disables noise for tests only.
    """
    from vfl.net.cape_aggregator import CapeAggregator, CapeSettings
    from vfl.net.site import SiteNode
    from vfl.rng import make_rng, spawn

    if len(sites) < 2:
        raise ConfigurationError("fit_sites needs at least 2 sites")
    unbounded = [s.name for s in sites if s.data.label_bounds is None]
    if model == "linear" and unbounded:   # a Site always declares its features' bounds (no data-derived path)
        raise ConfigurationError(f"site(s) {', '.join(unbounded)}: linear regression needs the label's public bounds "
                                 "(vfl.Site(..., label_bounds=(lo, hi)))")
    noise = insecure_test_noise or "full"
    # paper mode releases the linear constant beta, as vfl.CapeFM and the CLI do (Tasnim et al. Alg. 3)
    settings = CapeSettings(n_sites=len(sites), model=model, epsilon=epsilon, delta=delta, n_colluders=n_colluders,
                            calibration=calibration, weights=weights, fit_intercept=fit_intercept,
                            release_constant=calibration == "paper" and model == "linear", lambda_floor=lambda_floor,
                            timeout=timeout, max_run_seconds=max_run_seconds, noise=noise)
    settings.validate()
    seeds: list[Any] = [None] * len(sites)
    if random_state is not None:
        by_name = sorted(range(len(sites)), key=lambda i: sites[i].name)
        for gen, i in zip(spawn(make_rng(random_state), len(sites)), by_name, strict=True):
            seeds[i] = gen
    # throwaway signing identities, pinned by every site (vfl.protocols.cape_keys): the checks of a deployment
    with tempfile.TemporaryDirectory(prefix="vfl-identities-") as identities:
        write_identities(identities, [s.name for s in sites])
        aggregator = CapeAggregator(settings, bind, out=out, log=print if verbose else None,
                                    seeded=random_state is not None)
        nodes = {s.name: SiteNode(s.data, aggregator.endpoint, timeout=timeout, random_state=seeds[i], noise=noise,
                                  policy=SitePolicy.permissive(), identity_dir=identities)
                 for i, s in enumerate(sites)}
        return _run_on_loopback(aggregator.run, nodes)


# ---------------------------------------------------------------------------------------------- capeDJICA sites
def fit_ica_sites(sites: dict[str, Any], n_components: int, epsilon: float = 1.0, delta: float = 1e-5, *,
                  max_iter: int = 50, learning_rate: float = 1.0, pca_share: float = 0.1, clip: float = 2.0,
                  unit_size: int = 1, n_colluders: int | None = None, calibration: str = "analytic",
                  accountant: str = "gdp", anneal_deg: float = 60.0, anneal_step: float = 0.9,
                  restart_factor: float = 0.9, tol: float = 1e-6, scale: float = 1.0, random_state: int | None = None,
                  timeout: float = 120.0, max_run_seconds: float | None = 86400.0, out: str | None = None,
                  verbose: bool = False, bind: str = "tcp://127.0.0.1:0", insecure_test_noise: str | None = None
                  ) -> Any:
    """capePCA + capeDJICA over the real networked protocol on loopback (one aggregator, one thread per site).

    ``sites``: name -> the site's D x N_s matrix (columns = time points; divided by the public ``scale``, every
    column must then lie in the unit ball). Same protocol and messages as ``vfl djica-aggregator`` with
    ``vfl djica-site`` processes (docs/capedjica.md). ``epsilon``/``delta`` hold per site for the whole pipeline
    against the aggregator plus ``n_colluders`` sites. ``random_state`` (an int, experiments only) seeds every
    site: the model then equals :func:`vfl.models.cape_ica.fit_cape_ica` with the same seed on the sites in name
    order, bit for bit. ``insecure_test_noise="none"`` disables the noise (tests only). Returns the
    :class:`~vfl.models.ica_model.ICAModel` (written atomically to ``out`` if given).
    """
    from vfl.models.cape_ica import CapeICAConfig
    from vfl.net.cape_ica_aggregator import CapeICANetAggregator, CapeICASettings
    from vfl.net.cape_ica_site import ICASiteData, ica_site_node

    if not isinstance(sites, dict) or len(sites) < 2:
        raise ConfigurationError("fit_ica_sites needs a dict of at least 2 sites (name -> D x N_s matrix)")
    if insecure_test_noise not in (None, "none"):
        raise ConfigurationError("insecure_test_noise must be None or 'none'")
    noise = "none" if insecure_test_noise else "cape"
    config = CapeICAConfig(n_components, epsilon, delta, noise=noise, pca_share=pca_share, clip=clip,
                           max_iter=max_iter, learning_rate=learning_rate, anneal_deg=anneal_deg,
                           anneal_step=anneal_step, restart_factor=restart_factor, tol=tol, unit_size=unit_size,
                           n_colluders=n_colluders, calibration=calibration, accountant=accountant)
    settings = CapeICASettings(n_sites=len(sites), config=config, timeout=timeout, max_run_seconds=max_run_seconds)
    settings.validate()
    datas = [ICASiteData.build(name, X, scale=scale) for name, X in sites.items()]
    with tempfile.TemporaryDirectory(prefix="vfl-identities-") as identities:   # throwaway, as fit_sites
        write_identities(identities, [d.name for d in datas])
        aggregator = CapeICANetAggregator(settings, bind, out=out, log=print if verbose else None,
                                          seeded=random_state is not None)
        nodes = {d.name: ica_site_node(d, aggregator.endpoint, timeout=timeout, random_state=random_state,
                                       noise=noise, policy=SitePolicy.permissive(), identity_dir=identities)
                 for d in datas}
        return _run_on_loopback(aggregator.run, nodes)
