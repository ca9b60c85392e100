"""Issue 24: the networked FM release uses the budget split of the plan's mechanism options (default "risk"), the
same taus as the in-process mechanism of the same public plan, and its released cross blocks carry the two-sided
noise of those taus. Driven socket-free through the real wire encoding with 1024-bit INSECURE test keys."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.fm.dissection import DissectionPlan
from vfl.net.messages import decode, encode, message_of
from vfl.privacy.mechanisms import make_mechanism
from vfl.protocols.contracts import PlanBody, Registration
from vfl.protocols.fm_release import FMCoordinator, FMParty
from vfl.protocols.local_data import LocalData
from vfl.protocols.settings import RunSettings

N = 60


def _wire(out, sender=""):
    msg = message_of(out)
    msg.sender = sender
    return decode(encode(msg))


def _release(datas, options):
    settings = RunSettings(n_parties=2, model="linear", mechanism="gaussian-fm", epsilon=1.0, key_bits=1024,
                           allow_insecure_keys=True, precision_bits=24, mechanism_options=options)
    settings.validate()
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]
    coordinator = FMCoordinator(settings, regs)
    parties = {}
    for out in coordinator.plan_messages():
        plan = PlanBody.from_body(_wire(out).body)
        parties[out.to] = FMParty(datas[out.to], plan, rng=np.random.default_rng(7 + out.to), seeded=True,
                                  allow_insecure_keys=True)
    queue = [(i, _wire(o, regs[i].name)) for i, party in parties.items() for o in party.start()]
    while queue:
        i, msg = queue.pop(0)
        for out in coordinator.handle(i, msg):
            queue += [(out.to, _wire(o, regs[out.to].name)) for o in parties[out.to].handle(_wire(out))()]
    assert coordinator.done
    return coordinator, parties


@pytest.fixture(scope="module")
def datas():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, (N, 5))
    y = np.clip(X @ rng.uniform(-0.3, 0.3, 5) + 0.05 * rng.normal(size=N), -1, 1)
    return [LocalData.build("alice", X[:, :3], y, bounds=(-1, 1), label_bounds=(-1, 1)),
            LocalData.build("bob", X[:, 3:], bounds=(-1, 1))]


@pytest.mark.parametrize("options", [{}, {"budget_split": "equal"}, {"budget_split": 0.8}])
def test_networked_release_uses_the_split_everywhere(datas, options) -> None:
    coordinator, parties = _release(datas, options)
    # alice holds 3 columns + the constant column (intercept on), bob 2
    local = make_mechanism("gaussian-fm", plan=DissectionPlan([4, 2], 0, model="linear"), n_samples=N, epsilon=1.0,
                           delta=1e-5, noise_sharing="two-sided", **options)
    for mech in [coordinator.mech, *(p.mech for p in parties.values())]:
        assert mech.taus == pytest.approx(local.taus, rel=1e-12)
        assert mech.shares == pytest.approx(local.shares, rel=1e-12)
    report = coordinator.mech.privacy_report()
    assert report.epsilon == pytest.approx(1.0, rel=1e-9)
    assert report.extra["budget_shares"] == pytest.approx(local.shares)
    assert [p.epsilon for p in report.parties] == pytest.approx([p.epsilon for p in local.privacy_report().parties])


def test_default_networked_split_is_not_the_equal_split(datas) -> None:
    default, _ = _release(datas, {})
    equal, _ = _release(datas, {"budget_split": "equal"})
    assert default.mech.shares["alpha"] > 0.5 == equal.mech.shares["alpha"]
    assert default.mech.taus["alpha"] < equal.mech.taus["alpha"]


def test_a_bad_split_is_refused_before_anyone_registers() -> None:
    from vfl.exceptions import ConfigurationError

    settings = RunSettings(n_parties=2, mechanism="gaussian-fm", epsilon=1.0, key_bits=1024, allow_insecure_keys=True,
                           mechanism_options={"budget_split": 1.5})
    with pytest.raises(ConfigurationError, match="budget_split"):
        settings.validate()
