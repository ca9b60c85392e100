"""Signed noisy-gd and (DP-)BCD models: real `vfl party` processes against an honest and a hostile coordinator.

Invariant: a party signs and stores only the model its run gives: noisy-gd, the average of the iterates the
run's signed shares give (each iterate the one it was sent); (DP-)BCD, every coefficient block the one its owner
computed and signed, its own block bit for bit (vfl.net.round_check). Attacker: a coordinator (a subclass of the
real one, in this process: it sends anything it likes) that alters one coefficient of the model it hands out: in
the MODEL_CHECK and the RESULT alike, also with a forged release (a co-party's signed coefficients or shares
rewritten to match), or skipping the model check and sending the altered RESULT alone. Every party refuses with one
line, exits non-zero and writes no model file. On main each party exited 0 ("done: model released") with the altered
coefficients: a noisy-gd or BCD party took any RESULT after its rounds (checked: every hostile case below fails on
main). An honest run's model carries both parties' signatures and `vfl predict` uses it without
--allow-unsigned-model (the noisy-gd one: tests/net/test_network_gd_cli.py).

FAST TESTS: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from vfl.demo import free_port, make_demo_data
from vfl.models.modelio import load_model
from vfl.net.coordinator import Coordinator
from vfl.net.messages import IntArray, Message
from vfl.protocols.contracts import Out
from vfl.protocols.model_signing import verify_model_signatures
from vfl.protocols.settings import RunSettings
from vfl.secure.identity import load_pinned

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner

GENEROUS = 120
ROWS = 120
#: each mechanism's coordinator settings and the policy opt-in its parties need
SETTINGS = {
    "noisy-gd": dict(mechanism="noisy-gd", epsilon=1.0, mechanism_options={"steps": 3, "iterate_radius": 2.0}),
    "dp-bcd": dict(mechanism="dp-bcd", epsilon=10.0, rounds=3, mechanism_options={"abort_rule": "ignore"}),
}


class AlteringCoordinator(Coordinator):
    """The real coordinator, except that it adds 0.5 to coefficient ``index`` of the model it hands out.

    ``how``: "model" (the MODEL_CHECK's document and the RESULT), "forged release" (also rewrites the recorded
    release to match: the owner's BCD coefficient, or one noisy-gd share), "no check" (no MODEL_CHECK at all);
    "iterate" (noisy-gd): alters nothing at the end but sends both parties round 1's iterate with coefficient
    ``index`` moved by 0.01 (inside the ball, the same to both: their digests agree)."""

    def __init__(self, *args, index: int, how: str, **kw) -> None:
        super().__init__(*args, **kw)
        self.index, self.how = index, how

    def _alter(self, model):
        model.w = np.array(model.w, dtype=float)
        model.w[self.index] += 0.5
        return model

    def _run_gd(self, regs):
        model = super()._run_gd(regs)
        return model if self.how == "iterate" else self._alter(model)

    def send_out(self, outs, order):
        if self.how == "iterate":
            for o in outs:
                if o.type == "gd_round" and o.body["t"] == 1:
                    o.body["w"] = list(o.body["w"])
                    o.body["w"][self.index] += 0.01
        super().send_out(outs, order)

    def _run_bcd(self, regs):
        return self._alter(super()._run_bcd(regs))

    def _collect_signatures(self, regs, model):
        if self.how == "no check":
            return
        if self.how == "forged release":
            self._forge(model)
        super()._collect_signatures(regs, model)

    def _forge(self, model) -> None:
        items, index = self.release.items, self.index % len(model.w)
        for n, (party, msg) in enumerate(items):
            if msg.type.value == "bcd_coef":   # the block that holds the altered coefficient, as its owner "sent" it
                widths = [len(p.features) for p in model.parties]
                owner = next(i for i in range(len(widths)) if index < sum(widths[:i + 1]))
                if party == model.parties[owner].name:
                    lo = sum(widths[:owner])
                    coef = np.asarray(msg.array(), dtype=float).copy()
                    coef[index - lo] = model.w[index]
                    items[n] = (party, Message(msg.type, dict(msg.body), [coef], sender=party))
            elif msg.type.value == "gd_share":   # one share of the last round, shifted
                last = n
        if model.mechanism == "noisy-gd":
            party, msg = items[last]
            share = np.asarray(msg.ints(), dtype=object).copy()
            share.flat[0] = int(share.flat[0]) + 1
            items[last] = (party, Message(msg.type, dict(msg.body), [IntArray.of(share)], sender=party))


def _start_parties(procs, tmp_path, url: str, mechanism: str):
    data = make_demo_data(tmp_path / "data", ROWS, seed=3)
    extra = ["--no-progress", "--timeout", str(GENEROUS), "--allow-mechanisms", mechanism, "--insecure-test-keys"]
    alice = procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                        "age:tenure", "--label", "score", "--bounds", str(data["bounds"]), "--seed", "1",
                        "--model-out", str(tmp_path / "alice-model.json"), *extra)
    bob = procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                      "visits,spend", "--bounds", str(data["bounds"]), "--seed", "2",
                      "--model-out", str(tmp_path / "bob-model.json"), *extra)
    return data, (alice, bob)


def _run_hostile(procs, tmp_path, mechanism: str, index: int, how: str):
    url = f"tcp://127.0.0.1:{free_port()}"
    settings = RunSettings(n_parties=2, key_bits=1024, allow_insecure_keys=True, timeout=GENEROUS,
                           **SETTINGS[mechanism])
    coord = AlteringCoordinator(settings, url, out=str(tmp_path / "m.json"), index=index, how=how)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            coord.run()
        except BaseException as exc:   # noqa: BLE001 - reported by the test
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _, parties = _start_parties(procs, tmp_path, url, mechanism)
    results = [procs.finish(p) for p in parties]
    thread.join(GENEROUS)
    return results, failure


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("mechanism,index,how", [
    *((m, i, h) for m in ("noisy-gd", "dp-bcd") for i, h in ((0, "model"), (-1, "forged release"), (0, "no check"))),
    ("noisy-gd", 2, "iterate")])
def test_a_party_refuses_a_model_with_an_altered_coefficient_and_writes_nothing(procs, tmp_path, mechanism, index,
                                                                               how):
    """index 0 is alice's first coefficient, -1 the last (noisy-gd: the intercept, alice's; dp-bcd: bob's last)."""
    results, failure = _run_hostile(procs, tmp_path, mechanism, index, how)
    expected = {"model": "refusing to sign", "forged release": "signature", "iterate": "round 1",
                "no check": "not the one this party checked and signed"}[how]
    for code, out, err in results:
        line = _one_line(err)
        assert code != 0 and expected in line, (code, err, out[-600:])
        assert "model released" not in out
    assert not list(tmp_path.glob("*model*.json*")), list(tmp_path.iterdir())
    if how != "no check":   # the coordinator's run fails with the parties' refusal: no model file either
        assert failure and not (tmp_path / "m.json").exists()


def test_an_honest_dp_bcd_run_is_signed_by_both_parties_and_served_without_the_opt_out(procs, tmp_path,
                                                                                         identity_dir):
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "m.json"
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--timeout",
                        str(GENEROUS), "--mechanism", "dp-bcd", "--epsilon", "10", "--rounds", "3", "--abort-rule",
                        "ignore")
    data, parties = _start_parties(procs, tmp_path, url, "dp-bcd")
    results = [procs.finish(p) for p in (coord, *parties)]
    assert [r[0] for r in results] == [0, 0, 0], [r[2][-800:] for r in results]
    assert "signed by all 2 parties" in results[0][1]
    doc = json.loads(out.read_text())
    assert doc["mechanism"] == "dp-bcd" and sorted(doc["signatures"]) == ["alice", "bob"]
    pinned = load_pinned(identity_dir)
    for name in ("alice", "bob"):
        stored = tmp_path / f"{name}-model.json"
        assert json.loads(stored.read_text()) == doc
        assert verify_model_signatures(load_model(stored), pinned=pinned) == ["alice", "bob"]
    a, b = (np.genfromtxt(data[k], delimiter=",", names=True, dtype=None, encoding="utf-8") for k in ("alice", "bob"))
    joined = tmp_path / "joined.csv"
    joined.write_text("age,income,tenure,visits,spend\n" + "".join(
        f"{r['age']},{r['income']},{r['tenure']},{s['visits']},{s['spend']}\n" for r, s in zip(a, b, strict=True)))
    served = procs.start("predict", "--model", str(out), "--data", str(joined), "--out", str(tmp_path / "p.csv"))
    code, _, err = procs.finish(served)
    assert code == 0 and "UNSIGNED" not in err.upper() and (tmp_path / "p.csv").exists(), err[-800:]
    X = np.column_stack([[float(r[c]) for r in a] for c in ("age", "income", "tenure")]
                        + [[float(s[c]) for s in b] for c in ("visits", "spend")])
    predicted = np.genfromtxt(tmp_path / "p.csv", delimiter=",", names=True)
    column = predicted.dtype.names[-1]
    np.testing.assert_allclose(predicted[column], X @ np.array(doc["w"]), rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_a_noisy_gd_run_of_400_rounds_is_signed():
    """The MODEL_CHECK of a long run: 4 signed shares per round describe about 1.1 KB each round, more than the
    256 KiB message header holds from about 235 rounds on; the release index travels as a frame instead."""
    from vfl import Party, fit

    rng = np.random.default_rng(0)
    Xa, Xb, y = rng.uniform(-2, 2, (40, 3)), rng.uniform(0, 5, (40, 2)), rng.uniform(-4, 4, 40)
    m = fit([Party("a", Xa, bounds=[(-2, 2)] * 3), Party("b", Xb, y, bounds=[(0, 5)] * 2, label_bounds=(-4, 4))],
            model="linear", mechanism="noisy-gd", epsilon=1.0, steps=400, key_bits=1024, allow_insecure_keys=True,
            timeout=GENEROUS)
    assert verify_model_signatures(m) == ["a", "b"]


class StoppingCoordinator(Coordinator):
    """The real coordinator, except that it stops bob one round short of the plan (review10): when bob's last remainder
    (round T, to the label owner alice) arrives it first sends bob BCD_STOP (rounds_run T - 1), although alice never
    reported convergence, relays the remainder to alice, and drops alice's round-T remainder to bob. bob answers with
    his block after T - 1 steps, signed; alice completes round T; the document says rounds_run T, converged false."""

    def send_out(self, outs, order):
        kept, last = [], self.settings.rounds
        for o in outs:
            if o.type == "bcd_remainder" and o.body["round"] == last:
                if not order[o.to].label_owner:
                    continue   # alice's round-T remainder to bob: never delivered
                bob = next(i for i, r in enumerate(order) if not r.label_owner)
                super().send_out([Out(type="bcd_stop", body={"rounds_run": last - 1}, to=bob)], order)
            kept.append(o)
        super().send_out(kept, order)


@pytest.mark.parametrize("tol", [None, 1e-12])
def test_a_party_stopped_short_of_the_plan_does_not_get_its_block_signed(procs, tmp_path, tol):
    """Invariant: every block of a signed (DP-)BCD model is its owner's block after the rounds the document states
    (the plan's T, or the label owner's signed convergence count). Attacker: a coordinator that sends a party
    BCD_STOP one round short (unsigned: only the coordinator sends it), with no convergence (tol None: an honest
    coordinator never sends it) or inventing one (tol set). On 0bc9bea both parties signed and stored the model, bob's
    block after 2 of its 3 rounds, the document saying rounds_run 3 (both exit 0). Now bob refuses a BCD_STOP
    without a tolerance at once; with one, each party's BCD_COEF signs the rounds its block ran and the model check
    of both parties refuses blocks that ran other than the document's rounds_run."""
    url = f"tcp://127.0.0.1:{free_port()}"
    settings = RunSettings(n_parties=2, key_bits=1024, allow_insecure_keys=True, timeout=GENEROUS, tol=tol,
                           **SETTINGS["dp-bcd"])
    coord = StoppingCoordinator(settings, url, out=str(tmp_path / "m.json"))
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(coord.run, failure), daemon=True)
    thread.start()
    _, parties = _start_parties(procs, tmp_path, url, "dp-bcd")
    results = [procs.finish(p) for p in parties]
    thread.join(GENEROUS)
    expected = ("BCD_STOP in a run without a convergence tolerance" if tol is None
                else "did not run the model's 3 rounds")
    refused = [_one_line(err) for code, _, err in results if code != 0]
    assert refused and all(expected in line for line in refused), [r[2][-600:] for r in results]
    assert not list(tmp_path.glob("*model*.json*")), list(tmp_path.iterdir())
    assert failure and not (tmp_path / "m.json").exists()


def _catch(fn, failure: list) -> None:
    try:
        fn()
    except BaseException as exc:   # noqa: BLE001 - reported by the test
        failure.append(exc)


class UnseedingCoordinator(Coordinator):
    """The real coordinator, except that it leaves every READY out of the release it records and reads each as
    ``seeded: false`` (review10): its (DP-)BCD report then says no party ran with a fixed seed."""

    def _run_phase(self, regs, phase):
        handle, record = phase.handle, self.release.record

        def unseeded(i, msg):
            if msg.type.value == "ready":
                msg = Message(msg.type, {**msg.body, "seeded": False}, list(msg.payload), sender=msg.sender)
            return handle(i, msg)

        phase.handle = unseeded
        self.release.record = lambda party, msg: None if msg.type.value == "ready" else record(party, msg)
        super()._run_phase(regs, phase)


def test_a_seeded_party_does_not_sign_a_report_without_its_seed(procs, tmp_path):
    """Invariant: the signed (DP-)BCD report is the one the run gives, a party's fixed seed ("reproducible, not for
    release") included. Attacker: a coordinator that drops the parties' signed READYs (which carry the seeded flag)
    from the model check's release. On 63e1c48 both parties (each run with --seed) signed and stored a report
    without the seed (both exit 0): the rebuilt ring never required a READY. Now each party's model check needs one
    signed READY of every party."""
    url = f"tcp://127.0.0.1:{free_port()}"
    settings = RunSettings(n_parties=2, key_bits=1024, allow_insecure_keys=True, timeout=GENEROUS,
                           **SETTINGS["dp-bcd"])
    coord = UnseedingCoordinator(settings, url, out=str(tmp_path / "m.json"))
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(coord.run, failure), daemon=True)
    thread.start()
    _, parties = _start_parties(procs, tmp_path, url, "dp-bcd")
    results = [procs.finish(p) for p in parties]
    thread.join(GENEROUS)
    for code, out, err in results:
        assert code != 0 and "READY" in _one_line(err), (code, err[-600:], out[-600:])
    assert not list(tmp_path.glob("*model*.json*")), list(tmp_path.iterdir())
    assert failure and not (tmp_path / "m.json").exists()
