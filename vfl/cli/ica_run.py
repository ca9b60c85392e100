"""What ``vfl djica-aggregator`` and ``vfl djica-site`` run (issue 11; no click here)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.protocols.policy import SitePolicy

__all__ = ["run_djica_aggregator", "run_djica_site", "ica_report_text", "read_site_columns"]


def ica_report_text(r: dict[str, Any]) -> str:
    """A few lines of the pipeline's privacy report (the model JSON holds all of it)."""
    pca, ica = r["pca"], r["djica"]
    lines = [f"capePCA + capeDJICA privacy report ({r['n_sites']} sites, N_s = {r['n_rows']}, "
             f"calibration {ica['calibration']}, accountant {ica['accountant']})"]
    if r["noise"] == "none":
        lines.append("  noise: none (TEST MODE): NOT differentially private")
    else:
        acc = ica.get("accountants") or {}
        side = ", ".join(f"{k} {v:.4g}" for k, v in acc.items() if isinstance(v, (int, float)))
        lines.append(f"  per site, whole pipeline: epsilon {r['epsilon']:g}, delta {r['delta']:g} against the "
                     f"aggregator + {ica['n_colluders']} colluding site(s); true epsilon {r['true_epsilon']:.4g}")
        lines.append(f"  capePCA mu {pca['mu_site']:.4g} (1 release); capeDJICA mu per round "
                     f"{ica['mu_round_true']:.4g} x {ica['planned_rounds']} planned rounds "
                     f"({ica['released_rounds']} released)")
        if side:
            lines.append(f"  epsilon by accountant: {side}")
    if r.get("seeded"):
        lines.append("  seeded noise: reproducible experiment only")
    return "\n".join(lines)


def run_djica_aggregator(*, sites: int, components: int, epsilon: float, delta: float, rounds: int,
                         learning_rate: float, pca_share: float, clip: float, unit_size: int, colluding: int | None,
                         calibration: str, accountant: str, anneal_deg: float, anneal_step: float, tol: float,
                         noise: str | None, bind: str, timeout: float, max_run_time: float, out: str,
                         curve_dir: str | None, max_message_bytes: int, quiet: bool,
                         echo: Callable[[str], None]) -> None:
    from vfl.models.cape_ica import CapeICAConfig
    from vfl.net.cape_ica_aggregator import CapeICANetAggregator, CapeICASettings
    from vfl.net.transport import load_server_keys

    if noise is not None:
        warnings.warn(f"--insecure-test-noise {noise}: this run is NOT differentially private (tests only)",
                      stacklevel=2)
    config = CapeICAConfig(components, epsilon, delta, noise="none" if noise else "cape", pca_share=pca_share,
                           clip=clip, max_iter=rounds, learning_rate=learning_rate, anneal_deg=anneal_deg,
                           anneal_step=anneal_step, tol=tol, unit_size=unit_size, n_colluders=colluding,
                           calibration=calibration, accountant=accountant)
    settings = CapeICASettings(sites, config, timeout, max_run_time)
    curve = load_server_keys(curve_dir) if curve_dir else None
    log = (lambda s: None) if quiet else echo
    agg = CapeICANetAggregator(settings, bind, curve=curve, out=out, log=log, max_message_bytes=max_message_bytes)
    model = agg.run()
    echo(ica_report_text(model.privacy_report))
    echo(f"model written to {out} (run {agg.run_id[:8]}; capeDJICA over {sites} sites; {components} components, "
         f"{model.n_rounds} rounds)")


def read_site_columns(path: str, columns: str | None) -> tuple[np.ndarray, list[str]]:
    """A site's CSV/Parquet table (one row per time point, one column per dimension) as the D x N_s matrix."""
    from vfl.data.config import read_party_csv
    from vfl.data.tables import table_columns

    names = columns if columns else ",".join(table_columns(path))
    table = read_party_csv(path, names)
    return np.asarray(table.X, dtype=float).T, list(table.feature_names)


def run_djica_site(*, connect: str, name: str, data: str, columns: str | None, scale: float, curve_dir: str | None,
                   timeout: float, seed: int | None, noise: str | None, echo: Callable[[str], None],
                   policy: SitePolicy | None = None, ledger: Any = None, budget: Any = None,
                   dataset_name: str | None = None, identity_dir: str | None = None,
                   insecure_no_identity: bool = False) -> None:
    from vfl.net.cape_ica_site import ICASiteData, ica_site_node
    from vfl.net.transport import load_client_keys

    X, names = read_site_columns(data, columns)
    local = ICASiteData.build(name, X, scale=scale, columns=names)
    if noise not in (None, "none"):
        raise ConfigurationError("capeDJICA sites take --insecure-test-noise none only")
    curve = load_client_keys(curve_dir, name) if curve_dir else None
    node = ica_site_node(local, connect, curve=curve, timeout=timeout, random_state=seed,
                         noise="none" if noise else "cape", log=echo, policy=policy, ledger=ledger,
                         budget=budget, dataset_name=dataset_name, identity_dir=identity_dir,
                         insecure_no_identity=insecure_no_identity, dataset_files=[str(Path(data).resolve())])
    echo(f"[{name}] {local.n_rows} time points x {len(names)} dimensions; connecting to {connect}")
    model = node.run()
    echo(f"[{name}] done: capeDJICA model released ({model.unmixing.shape[0]} components, {model.n_rounds} rounds)")
