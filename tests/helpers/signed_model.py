"""Test helper (not a test module): sign a hand-built model as its parties would at the end of a run.

``signed(model, identity_dir)`` gives ``model`` the roster a training coordinator records (each party's signed
registration and ROSTER_ENTRY, made by the real roster code) and every party's Ed25519 signature over the model
file's digest (vfl.protocols.model_signing), with the test identities of ``identity_dir``
(tests/conftest.py). `vfl predict` and `vfl score` accept only such files (issue 29).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from vfl.models.modelio import FittedModel
from vfl.net.messages import decode, encode, message_of
from vfl.protocols.roster import Roster, RosterCoordinator, sign_registration
from vfl.secure.identity import load_identity, load_party_identity

__all__ = ["signed"]


def signed(model: FittedModel, identity_dir: str | Path) -> FittedModel:
    if not model.run_id:
        model.run_id = secrets.token_hex(16)
    names = [p.name for p in model.parties]
    n = max(model.n_samples, 1)
    plan = {"parties": [{"name": p.name, "features": p.features} for p in model.parties], "n_samples": n,
            "label_owner": next((i for i, p in enumerate(model.parties) if p.label_owner), 0)}
    regs, rosters = [], []
    for p in model.parties:
        identity, pinned = load_party_identity(identity_dir, p.name)
        reg = sign_registration(identity, {"name": p.name, "n_rows": n, "features": p.features,
                                           "label_owner": p.label_owner, "row_ids": False})
        regs.append(reg)
        rosters.append(Roster(name=p.name, run=model.run_id, plan_body=plan, registration=reg, identity=identity,
                              pinned=pinned))
    coordinator = RosterCoordinator(names, model.run_id, [plan] * len(names), regs)
    for i, r in enumerate(rosters):
        coordinator.handle(i, decode(encode(message_of(r.entry()))))
    model.roster, model.signatures, model.loaded_digest = coordinator.record(), None, None
    digest = model.document_digest()
    model.signatures = {name: load_identity(identity_dir, name).sign(digest) for name in names}
    return model
