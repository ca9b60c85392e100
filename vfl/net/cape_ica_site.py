"""The capeDJICA site role: one organisation's columns (time points) of the D x N data (``vfl djica-site``; issue 11).

A capeDJICA site holds a D x N_s matrix whose columns lie in the unit ball (scaled by a public constant). It
registers (name, N_s, D, role ``djica-site``) with the aggregator (:mod:`vfl.net.cape_ica_aggregator`) and runs
:class:`~vfl.protocols.cape_djica_rounds.CapeICASite` through the generic :class:`~vfl.net.site.SiteNode`. What
leaves the site: REGISTER, its signed DH public values, its pairwise-masked noise shares (uniform words), its noisy
second-moment matrix (once) and its noisy infomax update (each round), heartbeats. Its data, its clean statistics
and its noise shares never leave it; it computes every noise std itself from the public plan and state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError, ProtocolError
from vfl.models.cape_pca import validate_site_columns
from vfl.models.ica_model import ICAModel
from vfl.net.messages import MAX_ICA_DIMS, MAX_MESSAGE_BYTES, Message, validate_name
from vfl.net.site import SiteNode
from vfl.net.transport import CurveClientKeys
from vfl.privacy.ledger import Budget, DatasetKey, Ledger, declared_name
from vfl.protocols.cape_djica_rounds import CapeICASite
from vfl.protocols.policy import SitePolicy
from vfl.rng import RandomState

__all__ = ["ICASiteData", "djica_session", "ica_site_node"]

ROLE = "djica-site"


@dataclass
class ICASiteData:
    """A site's D x N_s columns (each ||x_n||_2 <= 1 after dividing by the public ``scale``)."""

    name: str
    X: np.ndarray
    columns: list[str] | None = None
    scale: float = 1.0

    @classmethod
    def build(cls, name: str, X: Any, *, scale: float = 1.0, columns: Sequence[str] | None = None) -> ICASiteData:
        try:
            validate_name(name, "site name")
        except ProtocolError as exc:
            raise ConfigurationError(str(exc)) from None
        if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and np.isfinite(scale) and scale > 0):
            raise ConfigurationError(f"site {name}: the public scale must be a finite number > 0, got {scale!r}")
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
            raise DataValidationError(f"site {name}: the data must be a non-empty D x N_s matrix, got shape {X.shape}")
        if X.shape[0] > MAX_ICA_DIMS:
            raise DataValidationError(f"site {name}: D = {X.shape[0]} dimensions, more than the {MAX_ICA_DIMS} a "
                                      "capeDJICA run takes")
        try:
            return cls(name, validate_site_columns([X / scale], min_sites=1, what=f"site {name}")[0],
                       None if columns is None else [str(c) for c in columns], float(scale))
        except DataValidationError as exc:
            raise DataValidationError(str(exc).replace("site 0: ", f"site {name}: ")) from None

    @property
    def n_rows(self) -> int:
        """N_s: this site's columns (time points)."""
        return int(self.X.shape[1])

    def ledger_key(self, name: str | None = None) -> DatasetKey:
        """This site's budget in its privacy ledger: the declared ``name``, else the site's default budget (one per
        site, issue 29); recorded with it, the fingerprint of its dimension columns (or D), its public scale and
        its time points N_s."""
        decl = {"role": ROLE, "columns": self.columns, "dims": int(self.X.shape[0]), "scale": self.scale,
                "rows": self.n_rows}
        digest = hashlib.sha256(json.dumps(decl, sort_keys=True).encode()).hexdigest()
        covers = {"files": [], "columns": self.columns or [f"{int(self.X.shape[0])} dimensions"], "label": None,
                  "rows": self.n_rows}
        return DatasetKey(digest, declared_name(name), covers)

    def register_body(self) -> dict[str, Any]:
        return {"name": self.name, "n_rows": self.n_rows, "features": [], "label_owner": False,
                "dims": int(self.X.shape[0]), "role": ROLE}


def djica_session(noise: str = "cape", policy: SitePolicy | None = None
                  ) -> Callable[[Message, Any, RandomState], CapeICASite]:
    """The session factory of a capeDJICA site (``noise``: "cape", or the test-only "none"; ``policy``: what the
    site agrees to run, default :class:`SitePolicy`)."""

    def make(plan: Message, data: Any, random_state: RandomState) -> CapeICASite:
        return CapeICASite(data.X, random_state=random_state, noise=noise, max_message_bytes=MAX_MESSAGE_BYTES,
                           policy=policy)

    return make


def ica_site_node(data: ICASiteData, connect: str, *, curve: CurveClientKeys | None = None, timeout: float = 120.0,
                  random_state: RandomState = None, noise: str = "cape",
                  log: Callable[[str], None] | None = None, policy: SitePolicy | None = None,
                  ledger: Ledger | None = None, budget: Budget | None = None,
                  dataset_name: str | None = None, identity_dir: str | Path | None = None,
                  insecure_no_identity: bool = False, dataset_files: Sequence[str] = ()) -> SiteNode:
    """A :class:`SiteNode` running the capeDJICA session; ``run()`` returns the sites' copy of the model.
    ``ledger``/``budget``/``dataset_name``: the site's privacy ledger (the whole plan's spend is reserved);
    ``identity_dir``/``insecure_no_identity``: its signing identity and pinned co-sites (as :class:`SiteNode`)."""
    if random_state is not None and (isinstance(random_state, bool) or not isinstance(random_state, int)):
        raise ConfigurationError("a capeDJICA site's seed must be a non-negative integer (experiments only)")
    return SiteNode(data, connect, curve=curve, timeout=timeout, random_state=random_state,  # type: ignore[arg-type]
                    session_factory=djica_session(noise, policy), log=log, result_parser=_parse_result,
                    ledger=ledger, budget=budget, dataset_name=dataset_name, identity_dir=identity_dir,
                    insecure_no_identity=insecure_no_identity, dataset_files=dataset_files)


def _parse_result(msg: Message) -> ICAModel:
    """The sites' copy from RESULT: the compact model in the header, the arrays as checked float64 frames."""
    return ICAModel.from_result_parts(msg.body["model"], list(msg.payload))
