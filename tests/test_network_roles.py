"""Coordinator and PartyNode run directly (threads, real loopback sockets, 1024-bit INSECURE test keys):
what failing or misbehaving peers can make the other roles see or do."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from vfl.coordinator import Coordinator, RunSettings
from vfl.exceptions import DataValidationError, PartyFailure
from vfl.party import LocalData, PartyNode, wire_reason

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]


def _split(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    y = (rng.uniform(size=n) < 0.5).astype(float)
    return X[:, :2], X[:, 2:], y


def _run(settings: RunSettings, datas: list[LocalData], out=None):
    """Run a coordinator and one PartyNode thread per party; returns (coordinator error, {party: error})."""
    coord = Coordinator(settings, "tcp://127.0.0.1:0", out=out)
    errors: dict[str, BaseException] = {}

    def party(i: int, data: LocalData) -> None:
        try:
            PartyNode(data, coord.endpoint, timeout=30, order=i, allow_insecure_keys=True).run()
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


def test_a_party_error_quoting_its_data_does_not_reach_the_coordinator_or_other_parties(tmp_path):
    """Regression: the label owner's 'found [7.25]' (a label value) travelled in ERROR and then in every ABORT."""
    Xa, Xb, y = _split()
    y[17] = 7.25  # not a logistic label: detected only after the PLAN says "logistic"
    settings = RunSettings(2, "logistic", "none", None, None, key_bits=1024, allow_insecure_keys=True, timeout=30)
    out = tmp_path / "model.json"
    coord_error, errors = _run(settings, [LocalData.build("a", Xa, y, bounds=(-1, 1)),
                                          LocalData.build("b", Xb, bounds=(-1, 1))], out=str(out))
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
