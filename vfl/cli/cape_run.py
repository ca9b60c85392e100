"""What ``vfl coordinator --mechanism cape-fm`` and ``vfl site`` run (kept out of the vertical roles; no click here)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vfl.exceptions import ConfigurationError
from vfl.protocols.policy import SitePolicy

__all__ = ["run_cape_coordinator", "run_site", "cape_report_text"]


def cape_report_text(r: dict) -> str:
    """A few lines of the capeFM privacy report (the model JSON holds all of it)."""
    lines = [f"capeFM privacy report ({r['n_sites']} sites, N_s = {r['n_rows']}, {r['model']}, "
             f"calibration {r['calibration']})"]
    if r["noise"] is not True:
        lines.append(f"  noise: {r['noise']} (TEST MODE): NOT differentially private")
    else:
        lines.append(f"  per site: epsilon {r['claimed_epsilon']:g}, delta {r['delta']:g} against the aggregator + "
                     f"{r['n_colluders']} colluding site(s); true epsilon {r['true_epsilon']:.4g}")
        if r["n_colluders"] == 0:
            lines.append("  no colluding site is tolerated: a site's noise does not protect it against the aggregator "
                         "together with another site (--colluding S_C raises it, at the cost of more noise)")
    lines.append(f"  kappa {r['kappa']:.4g}, mu per site {r['mu_site']:.4g}; aggregate noise std alpha "
                 f"{r['aggregate_noise_std']['alpha']:.3g}, M {r['aggregate_noise_std']['M']:.3g}; floor "
                 f"{r['lambda_floor']:.3g} ({r['n_floored_eigenvalues']} eigenvalue(s) floored)")
    if r.get("seeded"):
        lines.append("  seeded noise: reproducible experiment only")
    return "\n".join(lines)


def run_cape_coordinator(*, sites: int | None, colluding: int | None, weights: str, noise: str | None, model: str,
                         epsilon: float | None, delta: float, bind: str, timeout: float, max_run_time: float, out: str,
                         curve_dir: str | None, calibration: str | None, max_message_bytes: int,
                         fit_intercept: bool, quiet: bool, echo: Callable[[str], None]) -> None:
    from vfl.net.cape_aggregator import CapeAggregator, CapeSettings
    from vfl.net.transport import load_server_keys

    if sites is None:
        raise ConfigurationError("cape-fm needs --sites S (the number of sites that must register)")
    if epsilon is None:
        raise ConfigurationError("cape-fm needs --epsilon > 0 (per site)")
    if calibration not in (None, "analytic", "paper"):
        raise ConfigurationError(f"cape-fm supports --calibration analytic or paper, not {calibration}")
    if noise is not None:
        warnings.warn(f"--insecure-test-noise {noise}: this run is NOT differentially private (tests only)",
                      stacklevel=2)
    settings = CapeSettings(sites, model, epsilon, delta, colluding, calibration or "analytic", weights,
                            fit_intercept, calibration == "paper" and model == "linear", None, timeout,
                            max_run_time, noise or "full")
    curve = load_server_keys(curve_dir) if curve_dir else None
    log = (lambda s: None) if quiet else echo
    agg = CapeAggregator(settings, bind, curve=curve, out=out, log=log, max_message_bytes=max_message_bytes)
    model_ = agg.run()
    echo(cape_report_text(model_.privacy_report))
    echo(f"model written to {out} (run {agg.run_id[:8]}; capeFM over {sites} sites; {len(model_.coef_)} "
         "coefficients)")


def run_site(*, connect: str, name: str, data: str, features: str, label: str, bounds: str, curve_dir: str | None,
             timeout: float, seed: int | None, noise: str | None, echo: Callable[[str], None],
             policy: SitePolicy | None = None, ledger: Any = None, budget: Any = None,
             dataset_name: str | None = None, identity_dir: str | None = None,
             insecure_no_identity: bool = False) -> None:
    from vfl.data.config import load_bounds_file, read_party_csv
    from vfl.net.site import SiteData, SiteNode
    from vfl.net.transport import load_client_keys

    table = read_party_csv(data, features, label=label)
    declared = load_bounds_file(bounds)
    missing = [f for f in table.feature_names if f not in declared]
    if missing:
        raise ConfigurationError(f"{bounds}: no bounds for feature(s) {', '.join(missing)}")
    local = SiteData.build(name, table.X, table.y, feature_names=table.feature_names,
                           bounds={f: declared[f] for f in table.feature_names}, label_bounds=declared.get(label),
                           label_name=label)
    curve = load_client_keys(curve_dir, name) if curve_dir else None
    node = SiteNode(local, connect, curve=curve, timeout=timeout, random_state=seed, noise=noise or "full", log=echo,
                    policy=policy, ledger=ledger, budget=budget, dataset_name=dataset_name,
                    identity_dir=identity_dir, insecure_no_identity=insecure_no_identity,
                    dataset_files=[str(Path(data).resolve())])
    echo(f"[{name}] {local.n_rows} rows, {len(local.feature_names)} features, label {label}; connecting to {connect}")
    model_ = node.run()
    echo(f"[{name}] done: capeFM model released ({len(model_.coef_)} coefficients)")
