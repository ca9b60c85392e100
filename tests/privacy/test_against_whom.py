"""The privacy report states epsilon against whom (issue 20: two-sided noise; issue 21 item 8: plain words).

Two-sided noise (both parties of a cross block add an independent draw of its full calibrated noise): against any
single party, alone or with the coordinator, the unknown noise of every block has the calibrated variance, so the
calibrated epsilon holds; the coordinator alone faces twice the variance on cross blocks. The numbers are checked
against the formula mu = sqrt(sum_b (Delta_b / sigma_b)^2), epsilon_of(mu, delta), written out here by hand, and the
block shares Delta_b against brute force over real neighbouring rows.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.privacy.accounting import (
    AGAINST_ANYONE,
    AGAINST_COORDINATOR,
    AGAINST_PARTY,
    AGAINST_PARTY_AND_COORDINATOR,
    PartyPrivacy,
    PrivacyReport,
)
from vfl.privacy.calibration import epsilon_of
from vfl.privacy.mechanisms import make_mechanism
from vfl.privacy.sensitivity import (
    gaussian_block_sensitivities,
    gaussian_party_view_sensitivities,
    gaussian_view_sensitivities,
    partial_block_frobenius,
    partial_block_frobenius_shared,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"
PLANS = [([1, 1], 0), ([1, 4, 3], 0), ([5, 3], 1), ([2, 2, 2, 2], 3)]
N, DELTA = 5000, 1e-5


def gaussian(counts: list[int], label: int, model: str, sharing: str = "two-sided", eps: float = 1.0):
    plan = DissectionPlan(counts, label, model=model, release_beta=model == "linear")
    return make_mechanism("gaussian-fm", plan=plan, n_samples=N, epsilon=eps, delta=DELTA, noise_sharing=sharing,
                          party_names=[f"p{k}" for k in range(len(counts))])


def hand_shares(counts: list[int], label: int, model: str) -> dict[str, tuple[str, bool, float]]:
    """Block name -> (order, cross, Delta_b), written out independently of vfl.privacy.sensitivity."""
    d = sum(counts)
    r = [math.sqrt(c / d) for c in counts]
    a1, m = (4.0, 1.0) if model == "linear" else (1.0, 1.0 / 8.0)
    out = {}
    if model == "linear":
        out["beta"] = ("beta", False, 1.0 / N)
    for k in range(len(counts)):
        out[f"alpha[{k}]"] = ("alpha", k != label, a1 * r[k] / N)
        for l in range(k, len(counts)):
            share = math.sqrt(2.0) * r[k] ** 2 if k == l else 2.0 * r[k] * r[l]
            out[f"M[{k},{l}]"] = ("M", k != l, m * share / N)
    return out


@pytest.mark.parametrize("counts,label", PLANS)
@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_coordinator_epsilon_is_the_block_formula(counts: list[int], label: int, model: str) -> None:
    mech = gaussian(counts, label, model)
    rep = mech.privacy_report()
    shares = hand_shares(counts, label, model)
    taus = mech.taus
    mu_coord = math.sqrt(sum((s / (taus[o] * (math.sqrt(2.0) if cross else 1.0))) ** 2
                             for o, cross, s in shares.values()))
    mu_one = math.sqrt(sum((s / taus[o]) ** 2 for o, _, s in shares.values()))
    assert mu_one == pytest.approx(mech.true_mu(), rel=1e-12)   # one draw: the shares add up to the calibration
    assert rep.epsilon_against[AGAINST_COORDINATOR] == pytest.approx(epsilon_of(mu_coord, DELTA), rel=1e-9)
    assert rep.epsilon_against[AGAINST_COORDINATOR] < rep.epsilon
    assert rep.epsilon_against[AGAINST_PARTY] == rep.epsilon_against[AGAINST_PARTY_AND_COORDINATOR] == rep.epsilon
    assert rep.epsilon == pytest.approx(1.0, rel=1e-9)
    assert rep.noise_sharing == "two-sided"
    assert rep.extra["mu_coordinator"] == pytest.approx(mu_coord, rel=1e-12)
    assert gaussian_block_sensitivities(mech.plan, N, mech.radii, release_beta=mech.plan.release_beta) == \
        pytest.approx({b: s for b, (_, _, s) in shares.items()}, rel=1e-12)


def weighted_partial_max(r2: float, w: float, n: int = 161) -> float:
    """max over a, b in [0, r^2], |c| <= sqrt(ab), S = 1 - max(a, b) of
    a^2 + b^2 - 2c^2 + 2w(a + b - 2c) S on a grid: the squared change when only one party's block (norm <= r)
    changes, cross entries weighted by w."""
    g = np.linspace(0.0, r2, n)
    A, B = np.meshgrid(g, g, indexing="ij")
    best = 0.0
    for cf in np.linspace(-1.0, 1.0, 2 * n + 1):
        C = cf * np.sqrt(A * B)
        S = 1.0 - np.maximum(A, B)
        best = max(best, float((A**2 + B**2 - 2 * C**2 + 2 * w * (A + B - 2 * C) * S).max()))
    return best


@pytest.mark.parametrize("r2", [0.05, 0.2, 1 / 3, 0.45, 0.5, 0.7, 1.0])
def test_partial_block_frobenius_shared_is_the_grid_maximum(r2: float) -> None:
    r = math.sqrt(r2)
    assert partial_block_frobenius_shared(r, 1.0) == pytest.approx(partial_block_frobenius(r), rel=1e-12)
    for w in (0.5, 1.0):
        assert partial_block_frobenius_shared(r, w) ** 2 == pytest.approx(weighted_partial_max(r2, w), rel=2e-3)
    with pytest.raises(ConfigurationError):
        partial_block_frobenius_shared(r, 0.0)


@pytest.mark.parametrize("counts,label", PLANS)
@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_per_party_coordinator_epsilon(counts: list[int], label: int, model: str) -> None:
    """Per party k: alpha from the blocks k's change moves (alpha[k] cross for k != L; every alpha block for the
    label owner), M from the grid maximum with cross entries weighted 1/2."""
    mech = gaussian(counts, label, model)
    rep = mech.privacy_report()
    d = sum(counts)
    a1, m = (4.0, 1.0) if model == "linear" else (1.0, 1.0 / 8.0)
    taus = mech.taus
    for k, p in enumerate(rep.parties):
        r2 = counts[k] / d
        if k == label:
            alpha2 = (a1 / N) ** 2 * (r2 + (1.0 - r2) / 2.0)
            beta2 = (1.0 / N / taus["beta"]) ** 2 if model == "linear" else 0.0
        else:
            alpha2, beta2 = (a1 / N) ** 2 * r2 / 2.0, 0.0
        m2 = (m / N) ** 2 * weighted_partial_max(r2, 0.5)
        mu = math.sqrt(alpha2 / taus["alpha"] ** 2 + m2 / taus["M"] ** 2 + beta2)
        assert p.epsilon_against[AGAINST_COORDINATOR] == pytest.approx(epsilon_of(mu, DELTA), rel=2e-3)
        assert p.epsilon_against[AGAINST_COORDINATOR] < p.epsilon
        assert p.epsilon_against[AGAINST_PARTY] == p.epsilon_against[AGAINST_PARTY_AND_COORDINATOR] == p.epsilon


def _row_change(model: str, x, y, x2, y2) -> tuple[np.ndarray, np.ndarray]:
    alpha = (-2.0 * (y * x - y2 * x2)) if model == "linear" else ((0.5 - y) * x - (0.5 - y2) * x2)
    M = (np.outer(x, x) - np.outer(x2, x2)) * (1.0 if model == "linear" else 1.0 / 8.0)
    return alpha, M


def _weighted(plan: DissectionPlan, alpha: np.ndarray, M: np.ndarray, w: float) -> tuple[float, float]:
    """Squared change of the released alpha and M (both halves of M), cross blocks weighted by w."""
    sl = plan.feature_slices
    a = sum((w if k != plan.label_owner else 1.0) * float(alpha[sl[k]] @ alpha[sl[k]]) for k in range(len(sl)))
    mm = sum((1.0 if k == l else w) * float(np.sum(M[sl[k], sl[l]] ** 2))
             for k in range(len(sl)) for l in range(len(sl)))
    return a, mm


def _in_domain(rng: np.random.Generator, counts: list[int]) -> np.ndarray:
    """A random row of the public domain: every column in [-1, 1]/sqrt(d) (so ||x|| <= 1, block k <= r_k)."""
    d = sum(counts)
    x = rng.uniform(-1, 1, d) / math.sqrt(d)
    corner = rng.random(d) < 0.7
    x[corner] = np.sign(x[corner]) / math.sqrt(d)
    return x


@pytest.mark.parametrize("counts,label", [([1, 1], 0), ([2, 2], 0), ([1, 3, 2], 1)])
@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_view_sensitivities_bound_real_neighbours(counts: list[int], label: int, model: str) -> None:
    """No pair of rows of the public domain changes the coordinator's view by more than the declared view
    sensitivities (whole rows and one party's part), and the bound is attained where the derivation says."""
    plan = DissectionPlan(counts, label, model=model)
    radii = np.sqrt(np.asarray(counts) / sum(counts))
    n = 1
    view = gaussian_view_sensitivities(plan, n, radii, draws=2)
    parts = [gaussian_party_view_sensitivities(plan, k, n, radii, draws=2) for k in range(len(counts))]
    rng = np.random.default_rng(7)
    labels = [-1.0, 1.0] if model == "linear" else [0.0, 1.0]
    best = [0.0, 0.0]
    for _ in range(4000):
        x, x2 = _in_domain(rng, counts), _in_domain(rng, counts)
        y, y2 = rng.choice(labels), rng.choice(labels)
        a, mm = _weighted(plan, *_row_change(model, x, y, x2, y2), 0.5)
        assert a <= view["alpha"] ** 2 * (1 + 1e-9) and mm <= view["M"] ** 2 * (1 + 1e-9)
        best = [max(best[0], a), max(best[1], mm)]
        k = int(rng.integers(len(counts)))
        x3, sl = x.copy(), plan.feature_slices[k]
        x3[sl] = x2[sl]
        a, mm = _weighted(plan, *_row_change(model, x, y, x3, y2 if k == label else y), 0.5)
        assert a <= parts[k]["alpha"] ** 2 * (1 + 1e-9) and mm <= parts[k]["M"] ** 2 * (1 + 1e-9)
    # attained: x' = -x with the label kept is the largest alpha change
    assert best[0] == pytest.approx(view["alpha"] ** 2, rel=1e-9)
    assert best[1] <= view["M"] ** 2 and best[1] >= 0.5 * view["M"] ** 2


@pytest.mark.parametrize("mechanism", ["laplace-fm", "relaxed-fm"])
def test_laplace_and_relaxed_state_an_upper_bound_against_the_coordinator(mechanism: str) -> None:
    plan = DissectionPlan([2, 3], 0)
    kw = {} if mechanism == "laplace-fm" else {"delta": DELTA}
    rep = make_mechanism(mechanism, plan=plan, n_samples=N, epsilon=1.0, noise_sharing="two-sided", **kw
                         ).privacy_report()
    assert rep.epsilon_against == {AGAINST_COORDINATOR: rep.epsilon, AGAINST_PARTY: rep.epsilon,
                                   AGAINST_PARTY_AND_COORDINATOR: rep.epsilon}
    assert "upper bound" in rep.epsilon_against_notes[AGAINST_COORDINATOR]
    assert "upper bound" in rep.to_text()
    for p in rep.parties:
        assert p.epsilon_against[AGAINST_COORDINATOR] == p.epsilon_against[AGAINST_PARTY] == p.epsilon


def test_in_process_and_one_sided_releases() -> None:
    """In process (one process draws everything) the guarantee is against anyone who sees the model; with
    one-sided noise a party that responds to a block about someone else's data sees it without noise."""
    central = gaussian([1, 4, 3], 0, "linear", sharing="central").privacy_report()
    assert central.epsilon_against == {AGAINST_ANYONE: central.epsilon}
    assert central.parties[1].epsilon_against == {AGAINST_ANYONE: central.parties[1].epsilon}
    one = gaussian([1, 4, 3], 0, "linear", sharing="one-sided").privacy_report()
    assert one.epsilon_against[AGAINST_COORDINATOR] == one.epsilon
    assert one.epsilon_against[AGAINST_PARTY] == math.inf
    # party 0 (label, 1 column) answers every cross block: it sees them noise-free, the others' data exposed
    assert one.parties[0].epsilon_against[AGAINST_PARTY] == one.parties[0].epsilon
    assert one.parties[1].epsilon_against[AGAINST_PARTY] == math.inf
    assert "unbounded (no guarantee)" in one.to_text()
    single = make_mechanism("gaussian-fm", plan=DissectionPlan([3], 0), n_samples=N, epsilon=1.0, delta=DELTA,
                            noise_sharing="two-sided").privacy_report()
    assert single.epsilon_against == {AGAINST_ANYONE: single.epsilon} and single.noise_sharing is None
    with pytest.raises(ConfigurationError, match="noise_sharing"):
        gaussian([1, 1], 0, "linear", sharing="three-sided")


def test_report_round_trips_with_the_new_fields() -> None:
    rep = gaussian([2, 3], 1, "linear").privacy_report()
    doc = json.loads(rep.to_json())
    assert set(doc["epsilon_against"]) == {AGAINST_COORDINATOR, AGAINST_PARTY, AGAINST_PARTY_AND_COORDINATOR}
    assert set(doc["parties"][0]["epsilon_against"]) == set(doc["epsilon_against"])
    back = PrivacyReport(**{**doc, "parties": [PartyPrivacy(**p) for p in doc["parties"]]})
    assert back.to_dict() == rep.to_dict() and back.to_text() == rep.to_text()
    old = {k: v for k, v in doc.items() if k not in ("epsilon_against", "epsilon_against_notes", "noise_sharing")}
    old["parties"] = [PartyPrivacy(**{k: v for k, v in p.items() if k != "epsilon_against"}) for p in doc["parties"]]
    assert "against whom" not in PrivacyReport(**old).to_text()     # a report stored before these fields loads


def test_text_report_is_plain() -> None:
    """Issue 21 item 8: formal DP always yes/no, what was protected and against whom, no document users do not
    have, no unexplained symbols; every term the report uses is defined in docs/privacy.md."""
    docs = DOCS.read_text()
    texts = [gaussian([1, 4, 3], 0, m).privacy_report().to_text() for m in ("linear", "logistic")]
    plan = DissectionPlan([2, 3], 0)
    texts.append(make_mechanism("laplace-fm", plan=plan, n_samples=N, epsilon=1.0, noise_sharing="two-sided"
                                ).privacy_report().to_text())
    texts.append(make_mechanism("none", plan=plan, n_samples=N).privacy_report().to_text())
    for text in texts:
        assert re.search(r"formal DP guarantee: (yes|no)", text)
        assert "protected" in text
        for banned in ("spec", "§", "pitfall", "tau_", "mu*", "sym=", "Thm."):
            assert banned not in text, banned
    assert "against the coordinator alone" in texts[0] and "any single party" in texts[0]
    assert re.search(r"party 1 \(p1\): epsilon = 0\.\d+ against any other party, alone or with the coordinator; "
                     r"0\.\d+ against the coordinator alone", texts[0])
    heading = docs.split("## Reading a privacy report", 1)[1].split("\n## ", 1)[0]
    for term in ("formal DP guarantee", "bounded DP", "protected", "overall", "against whom", "coordinator alone",
                 "any single party", "a party together with the coordinator", "per party", "noise sharing",
                 "cross-party block", "data domain", "calibration", "joint", "iso", "mirror", "sensitivity",
                 "noise per coefficient", "alpha", "beta", "quadratic terms", "Laplace scale", "std", "randomness",
                 "upper bound", "unbounded", "claimed epsilon", "true epsilon", "delta"):
        assert term in heading, term


def test_the_networked_release_reports_two_sided_noise() -> None:
    """The coordinator's and each party's mechanism of a networked FM run describe the two-sided release."""
    import numpy as np_

    from vfl.protocols.contracts import PlanBody, Registration
    from vfl.protocols.fm_release import FMCoordinator, FMParty
    from vfl.protocols.local_data import LocalData
    from vfl.protocols.settings import RunSettings

    rng = np_.random.default_rng(0)
    X, y = rng.uniform(-1, 1, (30, 3)), rng.uniform(-1, 1, 30)
    datas = [LocalData.build("a", X[:, :1], y, bounds=(-1, 1), label_bounds=(-1, 1)),
             LocalData.build("b", X[:, 1:], bounds=(-1, 1))]
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]
    settings = RunSettings(n_parties=2, model="linear", mechanism="gaussian-fm", epsilon=1.0, key_bits=1024,
                           allow_insecure_keys=True)
    coordinator = FMCoordinator(settings, regs)
    rep = coordinator.mech.privacy_report()
    assert rep.noise_sharing == "two-sided" and coordinator.mech.cross_block_draws == 2
    assert rep.epsilon_against[AGAINST_COORDINATOR] < rep.epsilon_against[AGAINST_PARTY] == rep.epsilon
    for out in coordinator.plan_messages():
        party = FMParty(datas[out.to], PlanBody.from_body(out.body), rng=np_.random.default_rng(1), seeded=True,
                        allow_insecure_keys=True)
        assert party.mech.noise_sharing == "two-sided"


def test_one_line_summary_for_plan_printouts() -> None:
    rep = gaussian([1, 4, 3], 0, "linear").privacy_report()
    line = rep.against_summary()
    assert line.startswith("formal DP: yes; epsilon 1 against any single party or a party with the coordinator, ")
    assert f"{rep.epsilon_against[AGAINST_COORDINATOR]:.4g} against the coordinator alone (delta 1e-05)" in line
    rep.mark_seeded()
    assert rep.against_summary().startswith("formal DP: no;")
    central = gaussian([2, 2], 0, "linear", sharing="central").privacy_report().against_summary()
    assert "against anyone who sees the model" in central
    assert make_mechanism("none", plan=DissectionPlan([2, 2], 0), n_samples=N).privacy_report().against_summary() \
        == "formal DP: no; no noise"
