"""Choosing the release from public facts only: matrix release (Gaussian FM) or noisy gradients (``mechanism="auto"``).

The rule reads nothing but the public N, d (the unit domain's columns, intercept included), epsilon, delta and the
model; no data. Its statistic is the Gaussian FM's public eigenvalue floor lambda_floor = sigma_M sqrt(d)
(:attr:`vfl.privacy.mechanisms.Mechanism.lambda_floor`) measured against the average eigenvalue 1/d that M = X^T X/N
can have at most on the l2 domain (trace M = mean ||x||^2 <= 1): the ratio

    q = d lambda_floor(N, d, epsilon, delta)

says how much of the spectrum the matrix release's floor may cover. Four zones:

* q < :data:`CLIP_THRESHOLD`: the matrix release with the public scaling 1/sqrt(d) (the noise is small; clipping
  rows would only bias them);
* CLIP_THRESHOLD <= q < :data:`GRADIENT_THRESHOLD`: the matrix release with rows clipped to their public radius
  (``row_norm="clip"``: typical rows then use the norm budget they are given, which raises the signal eigenvalues
  against the same noise);
* GRADIENT_THRESHOLD <= q < :data:`NOISE_THRESHOLD`: noisy gradients (:mod:`vfl.privacy.gradient_release`) with
  clipped rows: the floor would replace most eigenvalues, d-vector gradients lose less. Linear regression releases
  the label term once (``label_release="once"``, its public default share of mu^2) and runs T =
  :data:`AUTO_GD_STEPS` rounds of the public step 1/L (eta T = 100: gradient descent then converges in directions
  of curvature ~ 1/(3d), which T = 25 does not); picked on seed 2024 by benchmarks/gd_label_once.py among six
  variants, confirmed on seed 7331 (docs/benchmarks_utility.md, "The label term released once"). Logistic
  regression keeps the every-round release with T = 25 (on seed 2024 the label-once release with T = 200 was less
  accurate in both logistic cells of this zone, benchmarks/utility_peers.py);
* q >= NOISE_THRESHOLD: the noise dominates any release; the matrix release with scaled rows, whose floor shrinks the
  model towards the intercept-only fit (the safest answer when nothing else can be learnt).

The solve is the library's default in every zone (linear: floor plus adaptive shrinkage of alpha; logistic: the
floor). The thresholds were fixed on one set of benchmark splits (benchmarks/utility_gd.py, seed 2024) and checked
on a second, disjoint one (seed 7331); docs/privacy.md, "Choosing the release from public facts".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vfl.fm.dissection import DissectionPlan
from vfl.fm.objective import validate_model
from vfl.privacy.gradient_release import DEFAULT_RADIUS, DEFAULT_STEPS
from vfl.privacy.mechanisms import make_mechanism

__all__ = ["ReleaseChoice", "choose_release", "CLIP_THRESHOLD", "GRADIENT_THRESHOLD", "NOISE_THRESHOLD",
           "floor_ratio", "AUTO_GD_STEPS", "AUTO_GD_LABEL_RELEASE"]

#: the zones of q = d * lambda_floor (module docstring)
CLIP_THRESHOLD = 0.02
GRADIENT_THRESHOLD = 0.25
NOISE_THRESHOLD = 1.0
#: the noisy-gradient zone's release (module docstring): T rounds, the label term released once
AUTO_GD_STEPS = 200
AUTO_GD_LABEL_RELEASE = "once"


@dataclass(frozen=True)
class ReleaseChoice:
    """What the rule picked, and why (recorded in the privacy report's ``extra["release_choice"]``)."""

    mechanism: str           # "gaussian-fm" or "noisy-gd"
    row_norm: str            # "scale" or "clip"
    regularization: str | None   # the matrix release's solve (None: the model's default); None for noisy-gd
    steps: int | None
    iterate_radius: float | None
    floor_ratio: float
    threshold: float
    reason: str
    #: noisy-gd only: "once" (alpha released once) or "every-round"; None for the matrix release
    label_release: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def floor_ratio(model: str, n_samples: int, n_features: int, epsilon: float, delta: float) -> float:
    """q = d lambda_floor of the Gaussian FM release for these public facts (one-party plan; module docstring)."""
    plan = DissectionPlan([n_features], 0, model=validate_model(model))
    mech = make_mechanism("gaussian-fm", plan=plan, n_samples=n_samples, epsilon=epsilon, delta=delta, domain="l2")
    return float(n_features * mech.lambda_floor)


def choose_release(model: str, n_samples: int, n_features: int, epsilon: float, delta: float) -> ReleaseChoice:
    """The release for public (model, N, d, epsilon, delta); ``n_features`` counts the intercept column."""
    q = floor_ratio(model, n_samples, n_features, epsilon, delta)
    zone = f"d * lambda_floor = {q:.3g}"
    if q >= NOISE_THRESHOLD:
        return ReleaseChoice("gaussian-fm", "scale", None, None, None, q, NOISE_THRESHOLD,
                             f"{zone} >= {NOISE_THRESHOLD:g}: noise dominates any release; the floored matrix release "
                             "shrinks towards the intercept-only fit")
    if q >= GRADIENT_THRESHOLD:
        linear = validate_model(model) == "linear"
        return ReleaseChoice("noisy-gd", "clip", None, AUTO_GD_STEPS if linear else DEFAULT_STEPS, DEFAULT_RADIUS, q,
                             GRADIENT_THRESHOLD, f"{zone} in [{GRADIENT_THRESHOLD:g}, {NOISE_THRESHOLD:g}): the matrix "
                             "release's floor would cover most of the spectrum, so d-vector gradients are released "
                             f"(rows clipped; the label term {'once' if linear else 'every round'})",
                             AUTO_GD_LABEL_RELEASE if linear else "every-round")
    if q >= CLIP_THRESHOLD:
        return ReleaseChoice("gaussian-fm", "clip", None, None, None, q, CLIP_THRESHOLD,
                             f"{zone} in [{CLIP_THRESHOLD:g}, {GRADIENT_THRESHOLD:g}): matrix release with rows "
                             "clipped to their public radius")
    return ReleaseChoice("gaussian-fm", "scale", None, None, None, q, CLIP_THRESHOLD,
                         f"{zone} < {CLIP_THRESHOLD:g}: matrix release with the public scaling")
