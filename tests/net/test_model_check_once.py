"""review2: a party signs ONE model per run.

Attacker: the coordinator (no party key). ``lambda_floor`` and ``regularization`` are run settings that are not in
the PLAN, so the party cannot pin them: the model check re-derives the model under whatever values the MODEL_CHECK
carries. Before this fix a party answered every MODEL_CHECK of its run, so one completed run gave the coordinator
several models, each signed by every party under their pinned keys, whose coefficient vectors span the whole
feature space: scoring one ID under each of them returns the joined row (every party's raw columns), the column
reader of issue 29 item 4.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.net.test_model_check import TamperingCoordinator, _fit
from vfl.exceptions import VFLError
from vfl.models.modelio import FittedModel
from vfl.net.coordinator import Coordinator, fm_model
from vfl.protocols.contracts import RegisterBody, Registration
from vfl.protocols.fm_release import FMCoordinator
from vfl.protocols.model_signing import verify_model_signatures
from vfl.secure.identity import load_pinned

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]


def _variant(c, model, lam, reg):
    """The model the party re-derives under ``lambda_floor=lam, regularization=reg`` (what the coordinator asks)."""
    s = copy.deepcopy(c.settings)
    s.lambda_floor, s.regularization = lam, reg
    regs = []
    for entry in model.roster["entries"]:
        r = Registration.of(b"", RegisterBody.from_body(entry["registration"], str(entry["party"])))
        r.n_rows = model.n_samples
        regs.append(r)
    phase = FMCoordinator(s, regs)
    index = {r.name: i for i, r in enumerate(regs)}
    for party, msg in c.release.items:
        phase.handle(index[party], msg)
    rebuilt = fm_model(s, regs, phase.finish(), c.run_id).to_dict()
    doc = model.to_dict()
    for key in ("w", "coef", "coefficients", "intercept", "extra", "inference"):
        doc[key] = rebuilt[key]
    return FittedModel.from_dict(doc), s


def _multi_sign(c, model, regs):
    """Ask every party to sign one model per floor between the noisy M's eigenvalues, then the honest one."""
    phase = FMCoordinator(c.settings, [copy.deepcopy(r) for r in regs])
    index = {r.name: i for i, r in enumerate(regs)}
    for party, msg in c.release.items:
        phase.handle(index[party], msg)
    s = np.sort(np.linalg.eigvalsh(phase.finish().objective.M))
    floors = [float(s[0]) / 2] + [float((a + b) / 2) for a, b in zip(s[:-1], s[1:], strict=True)]
    stolen = []
    honest_settings = c.settings
    for lam in floors:
        variant, c.settings = _variant(c, model, lam, "floor")
        Coordinator._collect_signatures(c, regs, variant)   # MODEL_CHECK with these settings, then RESULT-less
        stolen.append(variant)
    c.settings = honest_settings
    c.stolen = stolen


class MultiSigning(TamperingCoordinator):
    def _collect_signatures(self, regs, model) -> None:  # noqa: ANN001
        _multi_sign(self, model, regs)
        super()._collect_signatures(regs, model)


def test_a_party_signs_one_model_per_run(tmp_path, identity_dir, monkeypatch):
    import tests.net.test_model_check as tmc

    made = []

    class Capture(MultiSigning):
        def __init__(self, *a, **k) -> None:  # noqa: ANN002, ANN003
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(tmc, "TamperingCoordinator", Capture)
    try:
        _fit(tmp_path, identity_dir)
    except VFLError as exc:   # fixed: the party refuses the second model check, the run fails, no model written
        assert "one model check" in str(exc), exc
        assert not (tmp_path / "model.json").exists() and not (tmp_path / "alice.json").exists()
        return
    stolen = made[0].stolen
    pinned = load_pinned(identity_dir)
    for m in stolen:   # what vfl serve checks at alice: pinned keys, her own key in the roster
        verify_model_signatures(m, pinned=pinned, own=("alice", pinned.public_hex("alice")))
    C = np.array([np.append(m.coef_, m.intercept_) for m in stolen])
    x = np.array([0.3, -0.7, 0.55])          # one joined row: alice's a0, a1 and bob's b0
    scores = C[:, :-1] @ x + C[:, -1]        # what the hub learns from scoring it under each signed model
    recovered = np.linalg.lstsq(C[:, :-1], scores - C[:, -1], rcond=None)[0]
    pytest.fail(f"{len(stolen)} models signed by every party from one run; coefficient rank "
                f"{np.linalg.matrix_rank(C[:, :-1])}; joined row recovered to "
                f"{np.max(np.abs(recovered - x)):.1e}")


def _fake_derived(c, model):
    """The signed document's coefficients keyed by name, ``coef`` and ``intercept`` (what `vfl report` and any JSON
    reader take as the model) replaced by a unit vector; ``w`` (what vfl scores with) left honest."""
    honest = model.to_dict

    def to_dict():
        doc = honest()
        unit = [1.0] + [0.0] * (len(doc["coef"]) - 1)
        return {**doc, "coef": unit, "coefficients": dict(zip(doc["coefficients"], unit, strict=True)),
                "intercept": 0.0}

    model.to_dict = to_dict


def _integer_typed(c, model):
    """A field the comparison used to call equal under Python's == (800 == 800.0 == ...), other signed bytes."""
    honest = model.to_dict
    model.to_dict = lambda: {**honest(), "n_samples": float(honest()["n_samples"])}


@pytest.mark.parametrize("tamper,reason", [(_fake_derived, "coef, coefficients, intercept differ"),
                                           (_integer_typed, "n_samples differ")])
def test_a_party_refuses_derived_fields_that_are_not_those_of_w(tmp_path, identity_dir, tamper, reason):
    with pytest.raises(VFLError, match=reason):
        _fit(tmp_path, identity_dir, tamper)
    assert not (tmp_path / "model.json").exists() and not (tmp_path / "alice.json").exists()


def test_a_model_file_with_a_duplicate_key_is_refused(tmp_path):
    """Python's json keeps the last of duplicate keys, which the signatures cover; a reader that keeps the first (many
    do) would see the other value. A file writer could thus put a second ``w`` before the signed one."""
    from vfl.exceptions import ConfigurationError
    from vfl.models.modelio import PartyColumns, load_model

    m = FittedModel("linear", "gaussian-fm", [PartyColumns("alice", ["a0"], [[-1.0, 1.0]], 1.0, True)], [0.5])
    text = m.to_json()
    path = tmp_path / "dup.json"
    path.write_text(text.replace('{\n  "format"', '{\n  "w": [1.0],\n  "format"', 1))
    with pytest.raises(ConfigurationError, match="duplicate key"):
        load_model(path)
    path.write_text(text)
    assert load_model(path).w.tolist() == [0.5]
