"""Issue 24: the split of the joint Gaussian budget between the released blocks (docs/privacy.md, "Budget split
between the blocks"). Whatever the split, the joint calibration meets mu*(epsilon, delta) exactly; the default
"risk" split gives the alpha block the larger share when the eigenvalue floor dominates and tends to the equal
split as N grows; the networked (two-sided) reports follow the taus."""

from __future__ import annotations

import math

import pytest

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.privacy.accounting import gaussian_mu_of_blocks
from vfl.privacy.calibration import calibrate_mu, epsilon_of
from vfl.privacy.mechanisms import budget_shares, make_mechanism, risk_alpha_share


@pytest.mark.parametrize("split", ["risk", "equal", 0.1, 0.764, 0.95])
@pytest.mark.parametrize("counts,release_beta", [([18], False), ([3, 4, 2], False), ([6], True)])
@pytest.mark.parametrize("eps", [0.5, 1.0, 8.0])
def test_joint_calibration_meets_mu_star_for_every_split(split, counts, release_beta, eps) -> None:
    plan = DissectionPlan(counts, 0, model="linear", release_beta=release_beta)
    m = make_mechanism("gaussian-fm", plan=plan, n_samples=958, epsilon=eps, delta=1e-5, budget_split=split)
    mu = math.sqrt(sum((m.sens[k] / m.taus[k]) ** 2 for k in m.sens))
    assert mu == pytest.approx(calibrate_mu(eps, 1e-5), rel=1e-12, abs=0)
    assert m.true_mu() == pytest.approx(calibrate_mu(eps, 1e-5), rel=1e-12, abs=0)
    assert sum(m.shares.values()) == pytest.approx(1.0, abs=1e-12)
    assert m.privacy_report().epsilon == pytest.approx(eps, rel=1e-9)


def test_risk_split_gives_alpha_more_budget_where_the_floor_dominates() -> None:
    mu1 = calibrate_mu(1.0, 1e-5)
    small = risk_alpha_share(18, 958, calibrate_mu(0.5, 1e-5))    # garment-sized, epsilon 0.5
    mid = risk_alpha_share(18, 958, mu1)
    large_n = risk_alpha_share(11, 100_000, calibrate_mu(8.0, 1e-5))
    assert small > mid > 0.6
    assert risk_alpha_share(28, 414, calibrate_mu(0.2, 1e-5)) == pytest.approx(0.9)   # the cap (forest fires size)
    assert large_n == pytest.approx(0.5, abs=0.002)   # negligible noise: the equal split (by the reference norm)
    plan = DissectionPlan([18], 0, model="linear")
    m = make_mechanism("gaussian-fm", plan=plan, n_samples=958, epsilon=1.0, delta=1e-5)
    old = make_mechanism("gaussian-fm", plan=plan, n_samples=958, epsilon=1.0, delta=1e-5, budget_split="equal")
    assert m.shares["alpha"] == pytest.approx(mid)
    assert m.taus["alpha"] < old.taus["alpha"] and m.taus["M"] > old.taus["M"]
    assert m.lambda_floor > old.lambda_floor


def test_logistic_risk_split_is_the_equal_split() -> None:
    plan = DissectionPlan([5], 0, model="logistic")
    m = make_mechanism("gaussian-fm", plan=plan, n_samples=1000, epsilon=1.0, delta=1e-5)
    assert m.shares == {"alpha": 0.5, "M": 0.5}


@pytest.mark.parametrize("bad", ["half", 0.0, 1.0, -0.2, float("nan"), True, None])
def test_bad_split_is_refused(bad) -> None:
    plan = DissectionPlan([3], 0, model="linear")
    with pytest.raises(ConfigurationError, match="budget_split"):
        make_mechanism("gaussian-fm", plan=plan, n_samples=100, epsilon=1.0, delta=1e-5, budget_split=bad)
    with pytest.raises(ConfigurationError, match="budget_split"):
        budget_shares("linear", 3, 100, 1.0, {"alpha": 1.0, "M": 1.0}, bad)


def test_two_sided_reports_follow_the_split() -> None:
    """Networked release (both parties of a cross block draw): the per-party and coordinator epsilons are computed
    from the split's taus -- recomputed here from the view sensitivities and the taus of each split."""
    plan = DissectionPlan([1 + 4, 3], 0, model="linear")
    reports = {}
    for split in ("risk", "equal"):
        m = make_mechanism("gaussian-fm", plan=plan, n_samples=500, epsilon=1.0, delta=1e-5,
                           party_names=["alice", "bob"], noise_sharing="two-sided", budget_split=split)
        r = m.privacy_report()
        assert r.epsilon == pytest.approx(1.0, rel=1e-9)
        for p in r.parties:
            assert p.epsilon == pytest.approx(epsilon_of(gaussian_mu_of_blocks(p.sensitivity, m.taus), 1e-5))
        assert r.extra["mu_coordinator"] == pytest.approx(min(m.view_mu(2), m.true_mu()))
        assert r.extra["budget_shares"] == m.shares
        reports[split] = r
    # the split moves the per-party epsilons (they are not copied from the equal split)
    assert reports["risk"].parties[1].epsilon != pytest.approx(reports["equal"].parties[1].epsilon, rel=1e-6)


def test_privacy_md_report_example_is_what_the_default_prints() -> None:
    """docs/privacy.md's example report (N = 5000, parties 1 + 4 + 3, default split) is the current output: every
    line of the example is a line of the real report, or its start where the example cuts it with '...'.
    Fails with the equal split's numbers (0.7782, 0.8344, 0.5979) the example showed before issue 24."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "privacy.md").read_text(encoding="utf-8")
    example = text.split("## Reading a privacy report", 1)[1].split("```", 2)[1].strip().splitlines()
    plan = DissectionPlan([1, 4, 3], 0, model="linear")
    m = make_mechanism("gaussian-fm", plan=plan, n_samples=5000, epsilon=1.0, delta=1e-5,
                       party_names=["alice", "bob", "carol"], noise_sharing="two-sided")
    real = m.privacy_report().to_text().splitlines()
    for line in example:
        if "..." in line:
            assert any(r.startswith(line.split("...", 1)[0].rstrip()) for r in real), line
        else:
            assert line in real, line


def test_privacy_md_two_sided_example_figures() -> None:
    """docs/privacy.md's 'Noise shared by both parties' example (parties 1 + 4 + 3, epsilon = 1): the equal split's and
    the default split's (N = 500) against-whom figures are what the mechanism reports."""
    from pathlib import Path

    from vfl.privacy.accounting import AGAINST_COORDINATOR

    text = (Path(__file__).resolve().parents[2] / "docs" / "privacy.md").read_text(encoding="utf-8")
    quoted = " ".join(text.split())
    for split, n, fmt in (("equal", 5000, "{c:.3f} against the coordinator; per party {p} (against a party {a})"),
                          ("risk", 500, "N = 500 (α share 0.578): {c:.3f}; {p} ({a})")):
        m = make_mechanism("gaussian-fm", plan=DissectionPlan([1, 4, 3], 0, model="linear"), n_samples=n,
                           epsilon=1.0, delta=1e-5, noise_sharing="two-sided", budget_split=split)
        r = m.privacy_report()
        line = fmt.format(c=r.epsilon_against[AGAINST_COORDINATOR],
                          p=" / ".join(f"{q.epsilon_against[AGAINST_COORDINATOR]:.3f}" for q in r.parties),
                          a=" / ".join(f"{q.epsilon:.3f}" for q in r.parties))
        assert line in quoted, line


def test_radii_below_the_prepared_radii_are_refused() -> None:
    """Issue 24 audit: radii= used to shrink the reported per-party epsilon without clipping anything (radii 0.05 for a
    party whose rows have radius sqrt(d_k/d)); smaller radii are refused, equal or larger ones accepted."""
    plan = DissectionPlan([1, 4, 3], 0, model="linear")
    kw = {"plan": plan, "n_samples": 1000, "epsilon": 1.0, "delta": 1e-5}
    with pytest.raises(ConfigurationError, match="radii"):
        make_mechanism("gaussian-fm", radii=[0.05, 0.05, 0.05], **kw)
    with pytest.raises(ConfigurationError, match="radii"):
        make_mechanism("gaussian-fm", radii=[1.0, 1.0], **kw)
    default = make_mechanism("gaussian-fm", **kw)
    wider = make_mechanism("gaussian-fm", radii=[1.0, 1.0, 1.0], **kw)
    assert all(w.epsilon >= d.epsilon - 1e-12 for w, d in zip(wider.privacy_report().parties,
                                                              default.privacy_report().parties, strict=True))
