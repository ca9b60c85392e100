"""Coordinator and PartyNode run directly (threads, real loopback sockets, 1024-bit INSECURE test keys):
what failing or misbehaving peers can make the other roles see or do."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from vfl.exceptions import DataValidationError, PartyFailure
from vfl.net.coordinator import Coordinator, RunSettings
from vfl.net.party import LocalData, PartyNode, wire_reason
from vfl.protocols.policy import PartyPolicy

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner


def _split(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    y = (rng.uniform(size=n) < 0.5).astype(float)
    return X[:, :2], X[:, 2:], y


def _run(settings: RunSettings, datas: list[LocalData], identity_dir, out=None):
    """Run a coordinator and one PartyNode thread per party; returns (coordinator error, {party: error})."""
    coord = Coordinator(settings, "tcp://127.0.0.1:0", out=out)
    errors: dict[str, BaseException] = {}

    def party(i: int, data: LocalData) -> None:
        try:
            PartyNode(data, coord.endpoint, timeout=30, order=i, allow_insecure_keys=True,
                      policy=PartyPolicy.permissive(), identity_dir=identity_dir).run()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertions
            errors[data.name] = exc

    threads = [threading.Thread(target=party, args=(i, d), daemon=True) for i, d in enumerate(datas)]
    for t in threads:
        t.start()
    coord_error: BaseException | None = None
    try:
        coord.run()
    except BaseException as exc:  # noqa: BLE001
        coord_error = exc
    for t in threads:
        t.join(30)
    return coord_error, errors


def test_a_party_error_quoting_its_data_does_not_reach_the_coordinator_or_other_parties(tmp_path, identity_dir):
    """Regression: the label owner's 'found [7.25]' (a label value) travelled in ERROR and then in every ABORT."""
    Xa, Xb, y = _split()
    y[17] = 7.25  # not a logistic label: detected only after the PLAN says "logistic"
    settings = RunSettings(n_parties=2, model="logistic", mechanism="none", epsilon=None, delta=None,
                           key_bits=1024, allow_insecure_keys=True, timeout=30)
    out = tmp_path / "model.json"
    coord_error, errors = _run(settings, [LocalData.build("a", Xa, y, bounds=(-1, 1), label_bounds=(-10, 10)),
                                          LocalData.build("b", Xb, bounds=(-1, 1))], identity_dir, out=str(out))
    assert isinstance(coord_error, PartyFailure)
    assert "DataValidationError at party a" in str(coord_error) and "7.25" not in str(coord_error)
    assert isinstance(errors["b"], PartyFailure) and "aborted" in str(errors["b"])
    assert "7.25" not in str(errors["b"])
    assert isinstance(errors["a"], DataValidationError) and "7.25" in str(errors["a"])  # kept locally
    assert not out.exists()


def test_wire_reason_keeps_parameter_errors_and_withholds_the_rest():
    from vfl.exceptions import ConfigurationError, DegenerateNoisyObjective

    assert wire_reason(ConfigurationError("refuses 1024-bit keys"), "a") == "refuses 1024-bit keys"
    for exc in (DataValidationError("value 93.2 in age (row 17)"), DegenerateNoisyObjective("w = 3.1"),
                ValueError("could not convert 93.2")):
        reason = wire_reason(exc, "a")
        assert type(exc).__name__ in reason and "93.2" not in reason and "3.1" not in reason


def test_out_of_bounds_data_fail_locally_before_connecting():
    """Declared bounds are checked when the party's data are built, so nothing is sent at all."""
    Xa, _, y = _split()
    Xa[5, 1] = 3.5
    with pytest.raises(DataValidationError, match=r"value 3.5 .*row 5"):
        LocalData.build("a", Xa, y, bounds=(-1, 1))
    y_lin = np.linspace(-1, 1, Xa.shape[0])
    y_lin[3] = 2.0
    with pytest.raises(DataValidationError, match="label"):
        LocalData.build("a", Xa[:, :1], y_lin, bounds=(-1, 1), label_bounds=(-1, 1))
    t0 = time.monotonic()
    with pytest.raises(DataValidationError):  # no coordinator exists: nothing could have connected
        LocalData.build("a", Xa, y, bounds=(-1, 1))
    assert time.monotonic() - t0 < 5


class HeartbeatOnlyParty(threading.Thread):
    """Registers, then only ever sends heartbeats: alive by every liveness check, but never finishes."""

    def __init__(self, url: str, name: str, n_rows: int, features: list[str]) -> None:
        super().__init__(daemon=True)
        from vfl.net.transport import ClientTransport

        self.t = ClientTransport(url, name=name)
        self.body = {"name": name, "n_rows": n_rows, "features": features, "label_owner": False, "row_ids": False}
        self.aborted = threading.Event()

    def run(self) -> None:
        from vfl.net.messages import Message, MessageType

        self.t.send(Message(MessageType.REGISTER, self.body))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = self.t.recv(0.3)
            if msg is not None and msg.type is MessageType.ABORT:
                self.aborted.set()
                break
            if self.t.run_id:
                self.t.send(Message(MessageType.HEARTBEAT))
        self.t.close()


def test_a_party_that_heartbeats_forever_cannot_hold_the_run_open(tmp_path, identity_dir):
    """Regression: heartbeats reset the silence timeout, so the run had no upper bound at all."""
    Xa, Xb, y = _split()
    settings = RunSettings(n_parties=2, model="linear", mechanism="none", epsilon=None, delta=None,
                           key_bits=1024, allow_insecure_keys=True, timeout=30, max_run_seconds=4.0)
    out = tmp_path / "model.json"
    coord = Coordinator(settings, "tcp://127.0.0.1:0", out=str(out))
    fake = HeartbeatOnlyParty(coord.endpoint, "b", Xb.shape[0], ["b0"])
    fake.start()
    errors: list[BaseException] = []

    def real_party() -> None:
        try:
            PartyNode(LocalData.build("a", Xa, 0.5 * y, bounds=(-1, 1), label_bounds=(-1, 1)), coord.endpoint,
                      timeout=30, order=0, allow_insecure_keys=True, policy=PartyPolicy.permissive(),
                      identity_dir=identity_dir).run()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    a = threading.Thread(target=real_party, daemon=True)
    a.start()
    t0 = time.monotonic()
    with pytest.raises(PartyFailure, match=r"did not finish within 4 s"):
        coord.run()
    assert time.monotonic() - t0 < 20
    a.join(20)
    fake.join(20)
    assert fake.aborted.is_set() and errors and isinstance(errors[0], PartyFailure)
    assert not out.exists()


def test_a_party_gone_after_the_release_does_not_turn_a_written_model_into_a_failed_run(tmp_path):
    """Regression: the model file was written first and a failed RESULT send then raised ProtocolError, so the
    CLI reported a failed run (exit 4) while the model file existed."""
    from vfl.exceptions import ProtocolError
    from vfl.models.modelio import FittedModel, PartyColumns
    from vfl.net.coordinator import Registration
    from vfl.net.messages import MessageType

    settings = RunSettings(n_parties=2, model="linear", mechanism="none", epsilon=None, delta=None,
                           key_bits=1024, allow_insecure_keys=True, timeout=5)
    out = tmp_path / "model.json"
    logs: list[str] = []
    coord = Coordinator(settings, "tcp://127.0.0.1:0", out=str(out), log=logs.append)
    regs = [Registration(peer=b"A", name="a", n_rows=10, features=["a0"], label_owner=True, order=0),
            Registration(peer=b"B", name="b", n_rows=10, features=["b0"], label_owner=False, order=1)]
    model = FittedModel("linear", "none", [PartyColumns("a", ["a0"]), PartyColumns("b", ["b0"])], [0.5, -0.25])
    coord._register_all = lambda: regs  # type: ignore[method-assign]
    coord._run_fm = lambda r: model  # type: ignore[method-assign]
    coord._collect_signatures = lambda r, m: None  # type: ignore[method-assign]   # (tests/net/test_model_check.py)
    delivered: list[bytes] = []

    def send(member: Registration, msg) -> None:  # noqa: ANN001
        assert msg.type is MessageType.RESULT
        if member.peer == b"A":
            raise ProtocolError("cannot reach peer: Host unreachable")
        delivered.append(member.peer)

    coord.send = send  # type: ignore[method-assign]
    assert coord.run() is model
    assert out.exists() and delivered == [b"B"]
    assert any("could not deliver the model to party a" in line for line in logs)
