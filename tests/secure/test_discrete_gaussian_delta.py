"""The discrete Gaussian's exact (eps, delta) curve against the continuous Gaussian's (issue 24 audit item): at a few
grid units it is worse (the docstring of vfl.secure.discrete_noise no longer claims 'sigma >= 1 suffices'); on a grid
that is fine relative to sigma and the sensitivity, as in the networked release, the two coincide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.privacy.calibration import delta_gaussian


def discrete_delta(eps: float, sigma: float, sens: int) -> float:
    """Exact hockey-stick divergence of N_Z(0, sigma^2) and N_Z(sens, sigma^2) (CKS 2020, Thm. 7 as a sum)."""
    y = np.arange(-int(40 * sigma) - sens, int(40 * sigma) + sens + 1).astype(float)
    lp, lq = -y ** 2 / (2 * sigma ** 2), -(y - sens) ** 2 / (2 * sigma ** 2)
    p, q = np.exp(lp - lp.max()), np.exp(lq - lq.max())
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum(np.maximum(0.0, p - math.exp(eps) * q)))


def test_a_few_grid_units_are_worse_than_the_continuous_gaussian() -> None:
    assert discrete_delta(1.0, 2.0, 1) == pytest.approx(7.25e-3, abs=5e-6)
    assert delta_gaussian(1.0, 0.5) == pytest.approx(6.83e-3, abs=5e-6)
    assert discrete_delta(1.0, 2.0, 1) > 1.06 * delta_gaussian(1.0, 0.5)


def test_a_fine_grid_matches_the_continuous_gaussian() -> None:
    assert discrete_delta(1.0, 2000.0, 1000) == pytest.approx(delta_gaussian(1.0, 0.5), rel=1e-6)
