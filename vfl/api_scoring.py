"""``vfl.score``: federated scoring over the real networked protocol on loopback, like ``vfl.fit`` (issue 22).

Every party of the model that holds features serves its own block from its own rows (:class:`vfl.api.Party` with
``ids``); the hub learns only the total score per ID (:mod:`vfl.protocols.scoring`; docs/serving.md).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vfl.api import Party, _run_on_loopback
from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning
from vfl.models.modelio import FittedModel
from vfl.models.modelio import load_model as read_model_file
from vfl.net.scoring import DEFAULT_MAX_QUERY_IDS, Scores, ScoringHubNode, ScoringPartyNode, scoring_block
from vfl.protocols.model_signing import check_signed
from vfl.secure.identity import write_identities
from vfl.secure.psi import normalise_ids

__all__ = ["load_model", "score"]


def _party_rows(model: FittedModel, party: Party) -> tuple[list[str], np.ndarray]:
    """A party's normalised IDs and its rows of its block's features (by name when it names its columns)."""
    block = scoring_block(model, party.name)
    if party.ids is None:
        raise ConfigurationError(f"party {party.name} gives no ids: scoring looks rows up by ID")
    names = party.feature_names if party.feature_names is not None else list(block.features)
    missing = [f for f in block.features if f not in names]
    if missing:
        raise ConfigurationError(f"party {party.name} has no column(s) {', '.join(missing)} of the model's block; a "
                                 "party serves only a model whose features match its columns")
    if party.X.shape[1] != len(names):
        raise DataValidationError(f"party {party.name}: {party.X.shape[1]} columns for {len(names)} feature names")
    X = party.X[:, [names.index(f) for f in block.features]]
    if not np.all(np.isfinite(X)):
        raise DataValidationError(f"party {party.name}: X contains NaN or infinity")
    return normalise_ids(party.ids, what=f"party {party.name}: ids"), X


def load_model(path: str | Path, *, allow_unsigned_model: bool = False,
               identity_dir: str | Path | None = None) -> FittedModel:
    """``vfl.load_model``: read a model file and check that every party of its training roster signed it (issue 29;
    :func:`vfl.protocols.model_signing.verify_model_signatures`), under the keys the roster records or, with
    ``identity_dir``, under the parties' keys pinned there. ``allow_unsigned_model``: a file with no signature at
    all (written before models were signed; an ``--insecure-no-identity``, (DP-)BCD or capeFM run) is returned with
    a :class:`PrivacyLeakWarning`. Any other failure raises :class:`IdentityError`. To read a file without any check
    (inspection only): :func:`vfl.models.modelio.load_model`."""
    from vfl.protocols.model_signing import load_signed_model
    from vfl.secure.identity import load_pinned

    return load_signed_model(path, allow_unsigned=allow_unsigned_model,
                             pinned=None if identity_dir is None else load_pinned(identity_dir))


def score(parties: Sequence[Party], model: FittedModel | str | Path, ids: Sequence[Any], *,
          timeout: float = 120.0, max_query_ids: int = DEFAULT_MAX_QUERY_IDS, bind: str = "tcp://127.0.0.1:0",
          verbose: bool = False, allow_unsigned_model: bool = False) -> Scores:
    """Score ``ids`` with ``model`` over loopback: every party of the model with features serves its block.

    Returns :class:`vfl.net.scoring.Scores`: ``value`` (linear: prediction; logistic: probability), ``label``
    (logistic), ``missing`` (IDs some party does not hold: NaN, never scored as zero), in the order of ``ids``.
    The hub computes ``sum_k c_k . clip(x_k) + b`` from pairwise-masked partial scores (docs/serving.md).
    All parties are this process with throwaway identities, so the check a `vfl serve` party makes of the model's
    signed training roster is skipped here (its columns are checked); serve a deployed model with `vfl serve`.
    The model must carry the signature of every party of its roster (:mod:`vfl.protocols.model_signing`, under the keys
    the roster records); ``allow_unsigned_model``: a model with no signature at all is used anyway, with a warning.
    """
    m = model if isinstance(model, FittedModel) else read_model_file(model)
    check_signed(m, "to score", allow_unsigned=allow_unsigned_model)
    rows = {p.name: _party_rows(m, p) for p in parties}
    log = print if verbose else None
    with tempfile.TemporaryDirectory(prefix="vfl-identities-") as identities:
        write_identities(identities, list(rows))
        hub = ScoringHubNode(m, bind, timeout=timeout, max_query_ids=max_query_ids, log=log)
        missing = [n for n in hub.names if n not in rows]
        if missing:
            hub.close()
            raise ConfigurationError(f"the model's serving part{'y' if len(missing) == 1 else 'ies'} "
                                     f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not among parties")
        # every party is this process and its identity is a throwaway: there is no party whose signature on the
        # model's roster could be checked (`vfl serve` checks it; docs/serving.md), so only the columns are checked
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)
            nodes = {name: ScoringPartyNode(m, name, *rows[name], hub.endpoint, identity_dir=identities,
                                            model_checked=True, timeout=timeout, log=log,
                                            max_query_ids=max_query_ids)
                     for name in hub.names}

        def run_hub() -> Any:
            try:
                hub.start()
                result = hub.score(ids)
            except BaseException as exc:
                hub.close(reason=str(exc) or type(exc).__name__)
                raise
            hub.close()
            return result

        return _run_on_loopback(run_hub, nodes)
