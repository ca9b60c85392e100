"""Issue 29: a party signs a model only if it follows from the signed release of the run it completed
(vfl.net.model_check).

Attacker: the coordinator, which builds the MODEL_CHECK (the release it recorded, the run settings, the model
document) and may alter any part of it. Real Coordinator and PartyNode objects over loopback ZeroMQ with real
Ed25519 identities and 1024-bit INSECURE test Paillier keys; the hostile coordinator is the real one with its model
check tampered with just before it is sent. Every tampering ends the run with the party's one-line refusal and no
model file; the untampered run gives a file every party signed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from vfl.api import _run_on_loopback
from vfl.exceptions import VFLError
from vfl.net.coordinator import Coordinator
from vfl.net.party import LocalData, PartyNode
from vfl.protocols.model_signing import verify_model_signatures
from vfl.protocols.policy import PartyPolicy
from vfl.protocols.settings import RunSettings

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]


def _alter_w(c, model):
    model.w = model.w.copy()
    model.w[0] += 0.5         # towards a unit-vector coefficient: the column reader of issue 29, item 4


def _alter_report(c, model):
    model.privacy_report = {**model.privacy_report, "epsilon": 0.01}


def _alter_bounds(c, model):
    model.parties[1].bounds = [[-100.0, 100.0]]   # coefficients in original units change with the bounds


def _alter_settings(c, model):
    c.settings.epsilon = 5.0       # settings that do not reproduce the plan the parties accepted


def _alter_block(c, model):
    party, msg = next((p, m) for p, m in c.release.items if m.type.value == "block")
    msg.payload = [np.asarray(msg.payload[0]) + 0.5]   # not what its producer signed


def _drop_share(c, model):
    first = next(i for i, (_, m) in enumerate(c.release.items) if m.type.value == "share")
    del c.release.items[first]


TAMPERING = [(_alter_w, "coefficients do not follow"), (_alter_report, "privacy_report differ"),
             (_alter_bounds, "differ from what the run's release gives"),
             (_alter_settings, "do not reproduce the plan"), (_alter_block, "bad signature on recorded block"),
             (_drop_share, "lacks blocks of this run")]


class TamperingCoordinator(Coordinator):
    def __init__(self, *args, tamper=None, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.tamper = tamper

    def _collect_signatures(self, regs, model) -> None:  # noqa: ANN001
        if self.tamper is not None:
            self.tamper(self, model)
        super()._collect_signatures(regs, model)


def _fit(tmp_path, identity_dir, tamper=None):
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, (800, 3))   # N and epsilon large enough that the noisy M is never degenerate
    y = np.clip(X @ [0.4, -0.3, 0.2], -1, 1)
    settings = RunSettings(n_parties=2, mechanism="gaussian-fm", epsilon=4.0, delta=1e-5, key_bits=1024,
                           allow_insecure_keys=True, timeout=60)
    settings.validate()
    coordinator = TamperingCoordinator(settings, "tcp://127.0.0.1:0", out=str(tmp_path / "model.json"),
                                       tamper=tamper)
    datas = [LocalData.build("alice", X[:, :2], y, feature_names=["a0", "a1"], bounds=(-1, 1), label_bounds=(-1, 1)),
             LocalData.build("bob", X[:, 2:], feature_names=["b0"], bounds=(-1, 1))]
    nodes = {d.name: PartyNode(d, coordinator.endpoint, timeout=60, order=i, allow_insecure_keys=True,
                               identity_dir=identity_dir, policy=PartyPolicy.permissive(frozenset({"gaussian-fm"})),
                               model_out=tmp_path / f"{d.name}.json")
             for i, d in enumerate(datas)}
    return _run_on_loopback(coordinator.run, nodes)


def test_an_honest_run_gives_a_model_every_party_signed_and_stored(tmp_path, identity_dir):
    model = _fit(tmp_path, identity_dir)
    assert verify_model_signatures(model) == ["alice", "bob"]
    written = json.loads((tmp_path / "model.json").read_text())
    assert sorted(written["signatures"]) == ["alice", "bob"]
    for name in ("alice", "bob"):   # each party stored the very file the coordinator wrote
        assert json.loads((tmp_path / f"{name}.json").read_text()) == written
    # the Python loader checks the signatures too (vfl.load_model), under pinned keys with identity_dir
    import vfl

    assert vfl.load_model(tmp_path / "alice.json", identity_dir=identity_dir).signatures == written["signatures"]
    written["intercept"] = 0.0      # a derived field, but inside the signed document
    (tmp_path / "edited.json").write_text(json.dumps(written))
    with pytest.raises(vfl.VFLError, match="refused even with --allow-unsigned-model"):
        vfl.load_model(tmp_path / "edited.json", allow_unsigned_model=True)


@pytest.mark.parametrize("tamper,reason", TAMPERING, ids=[t.__name__ for t, _ in TAMPERING])
def test_a_party_refuses_to_sign_a_model_that_does_not_follow_from_the_release(tmp_path, identity_dir, tamper,
                                                                               reason):
    with pytest.raises(VFLError) as info:   # the party's refusal, or the coordinator's PartyFailure quoting it
        _fit(tmp_path, identity_dir, tamper)
    assert reason in str(info.value), info.value
    assert not (tmp_path / "model.json").exists()
    assert not (tmp_path / "alice.json").exists() and not (tmp_path / "bob.json").exists()


def test_the_release_travels_packed_in_one_frame_and_is_checked_on_unpacking():
    """A run has more payloads than a message may carry frames (MAX_FRAMES): the model check packs them into one
    frame; unpacking gives them back exactly and refuses a size that leaves the frame or trailing bytes."""
    from vfl.exceptions import ProtocolError
    from vfl.net.messages import MAX_FRAMES, IntArray, pack_payloads, unpack_payloads

    payloads = [np.arange(6.0).reshape(2, 3), IntArray.of(np.array([[2**70, -3]], dtype=object)), b"key"] * MAX_FRAMES
    descs, blob = pack_payloads(payloads)
    back = unpack_payloads(descs, blob)
    assert len(back) == len(payloads) > MAX_FRAMES
    np.testing.assert_array_equal(back[0], payloads[0])
    assert back[1].values.tolist() == [[2**70, -3]] and back[2] == b"key"
    with pytest.raises(ProtocolError, match="does not fit the frame"):
        unpack_payloads([{**descs[0], "size": len(blob) + 1}], blob)
    with pytest.raises(ProtocolError, match="trailing bytes"):
        unpack_payloads(descs[:-1], blob)
