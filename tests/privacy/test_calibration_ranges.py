"""Issue 14, item 5: out-of-range epsilon gives a clear error, and no calibration loop can run forever."""

from __future__ import annotations

import math
import time

import pytest

from vfl.exceptions import PrivacyParameterError
from vfl.fm.dissection import DissectionPlan
from vfl.privacy import calibration
from vfl.privacy.calibration import EPSILON_MAX, EPSILON_MIN, calibrate_mu, delta_gaussian, epsilon_of
from vfl.privacy.mechanisms import make_mechanism

PLAN = DissectionPlan([2, 3], 0, model="linear")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name,epsilon,delta", [
    ("gaussian-fm", 1e200, 1e-5),       # the red team's frozen party: delta_G overflowed to NaN, bisection never ended
    ("gaussian-fm", 1e155, 1e-5),
    ("relaxed-fm", 1e200, 1e-5),
    ("laplace-fm", 1e-300, None),       # noise scale 7e299: a traceback deep in the noise sampler before
    ("laplace-fm", 1e200, None),
    ("gaussian-fm", 1e-300, 1e-5),
])
def test_absurd_epsilon_is_a_clear_error_at_construction(name, epsilon, delta):
    start = time.process_time()   # CPU time: no loop ran (wall time would also count a busy machine's other work)
    with pytest.raises(PrivacyParameterError, match=r"epsilon must lie in \[1e-09, 1e\+09\]"):
        make_mechanism(name, plan=PLAN, n_samples=100, epsilon=epsilon, delta=delta)
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize("epsilon", [EPSILON_MIN, 1e-3, 1.0, 1e6, EPSILON_MAX])
def test_the_whole_accepted_range_calibrates_to_the_target_delta(epsilon):
    mu = calibrate_mu(epsilon, 1e-5)
    assert mu > 0 and math.isfinite(mu)
    assert delta_gaussian(epsilon, mu) <= 1e-5
    assert delta_gaussian(epsilon, mu * (1 + 1e-9)) > 1e-5 * (1 - 1e-6)   # tight, not just safe
    assert epsilon_of(mu, 1e-5) == pytest.approx(epsilon, rel=1e-6)


@pytest.mark.timeout(10)
def test_calibration_loops_are_bounded_even_if_delta_never_crosses(monkeypatch):
    """A delta_G that never exceeds delta (or never drops below it) cannot keep the doubling loop alive."""
    monkeypatch.setattr(calibration, "delta_gaussian", lambda eps, mu: 0.0)
    with pytest.raises(PrivacyParameterError, match="cannot calibrate"):
        calibrate_mu(1.0, 1e-5)
    monkeypatch.setattr(calibration, "delta_gaussian", lambda eps, mu: 0.5)
    with pytest.raises(PrivacyParameterError, match="cannot compute"):
        epsilon_of(1.0, 1e-5)


@pytest.mark.timeout(10)
def test_nan_from_delta_gaussian_raises_instead_of_steering_the_bisection(monkeypatch):
    monkeypatch.setattr(calibration, "delta_gaussian", lambda eps, mu: math.nan)
    with pytest.raises(PrivacyParameterError, match="numerically undefined"):
        calibrate_mu(1.0, 1e-5)
    with pytest.raises(PrivacyParameterError, match="numerically undefined"):
        epsilon_of(1.0, 1e-5)


def test_delta_gaussian_itself_is_nan_where_the_old_search_hung():
    """Documents why the NaN check is needed: the unfixed calibrate_mu searched on this value."""
    assert math.isnan(delta_gaussian(1e200, 1.0))
