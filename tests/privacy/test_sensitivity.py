"""Sensitivities: never exceeded by adversarial neighbours, attained where the spec says (§1.2-1.4, §2.2, §2.6, §5.3).

Every check recomputes the released coefficient vector of one row from scratch with numpy and compares the
difference between two neighbouring rows with the value the library *declares*.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from vfl.fm.dissection import DissectionPlan
from vfl.privacy.sensitivity import (
    block_l1_mass,
    gaussian_party_sensitivities,
    gaussian_sensitivities,
    laplace_block_table_sum,
    laplace_party_sensitivity_sum,
    laplace_sensitivity_sum,
    partial_block_frobenius,
    relaxed_sensitivity,
    xu_party_sensitivity_sum,
)

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True)


# ----------------------------------------------------------------------------- per-row coefficient vectors
def row_alpha(model: str, x: np.ndarray, y: float) -> np.ndarray:
    return -2.0 * y * x if model == "linear" else (0.5 - y) * x


def row_matrix(model: str, x: np.ndarray) -> np.ndarray:
    return np.outer(x, x) * (1.0 if model == "linear" else 1.0 / 8.0)


def row_vech(model: str, x: np.ndarray, y: float, release_beta: bool) -> np.ndarray:
    """Sum-form per-row released vector: [beta,] alpha, vech(M) (spec §0.4 'vech' layout)."""
    iu = np.triu_indices(x.size)
    parts = [row_alpha(model, x, y), row_matrix(model, x)[iu]]
    if release_beta and model == "linear":
        parts.insert(0, np.array([y * y]))
    return np.concatenate(parts)


def l1_diff(model, x, y, x2, y2, release_beta=False) -> float:
    return float(np.abs(row_vech(model, x, y, release_beta) - row_vech(model, x2, y2, release_beta)).sum())


# ----------------------------------------------------------------------------- strategies
def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    return v / n if n > 0 else np.eye(v.size)[0]


@st.composite
def linf_row(draw, d: int, model: str):
    kind = draw(st.sampled_from(["corner", "box", "axis"]))
    if kind == "corner":
        x = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=d, max_size=d)))
    elif kind == "axis":
        x = np.zeros(d)
        x[draw(st.integers(0, d - 1))] = draw(st.sampled_from([-1.0, 1.0]))
    else:
        x = np.array(draw(st.lists(st.floats(-1, 1), min_size=d, max_size=d)))
    y = draw(st.sampled_from([0.0, 1.0])) if model == "logistic" else draw(
        st.one_of(st.sampled_from([-1.0, 0.0, 1.0]), st.floats(-1, 1)))
    return x, y


@st.composite
def l2_row(draw, d: int, model: str):
    kind = draw(st.sampled_from(["sphere", "ball", "axis", "diag"]))
    if kind == "axis":
        x = np.zeros(d)
        x[draw(st.integers(0, d - 1))] = draw(st.sampled_from([-1.0, 1.0]))
    elif kind == "diag":
        x = np.array(draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=d, max_size=d))) / math.sqrt(d)
    else:
        v = np.array(draw(st.lists(st.floats(-1, 1), min_size=d, max_size=d)))
        x = _unit(v) * (1.0 if kind == "sphere" else draw(st.floats(0, 1)))
    y = draw(st.sampled_from([0.0, 1.0])) if model == "logistic" else draw(
        st.one_of(st.sampled_from([-1.0, 0.0, 1.0]), st.floats(-1, 1)))
    return x, y


# ============================================================================ Laplace (spec §1.2)
@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_laplace_exhaustive_corners_never_exceed(model: str, d: int) -> None:
    ys = [0.0, 1.0] if model == "logistic" else [-1.0, 0.0, 1.0]
    corners = [np.array(c) for c in itertools.product([-1.0, 0.0, 1.0], repeat=d)]
    rows = [(x, y) for x in corners for y in ys]
    vecs = np.array([row_vech(model, x, y, True) for x, y in rows])
    worst = max(np.abs(vecs - v).sum(axis=1).max() for v in vecs)
    for variant in ("paper", "tight", "xu", "zhang"):
        declared = laplace_sensitivity_sum(model, d, variant=variant, release_beta=True)
        assert worst <= declared + 1e-12, (variant, worst, declared)


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("d", [1, 3, 6])
def test_laplace_random_neighbours_never_exceed(model: str, d: int) -> None:
    @SETTINGS
    @given(linf_row(d, model), linf_row(d, model), st.booleans())
    def check(t1, t2, beta):
        diff = l1_diff(model, *t1, *t2, release_beta=beta)
        tight = laplace_sensitivity_sum(model, d, variant="tight", release_beta=beta)
        assert diff <= tight + 1e-9
        assert tight <= laplace_sensitivity_sum(model, d, variant="paper", release_beta=beta) + 1e-12

    check()


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("d", [1, 4, 9])
def test_laplace_d2_column_never_exceeded(model: str, d: int) -> None:
    @SETTINGS
    @given(l2_row(d, model), l2_row(d, model), st.booleans())
    def check(t1, t2, beta):
        diff = l1_diff(model, *t1, *t2, release_beta=beta)
        assert diff <= laplace_sensitivity_sum(model, d, variant="tight", domain="l2", release_beta=beta) + 1e-9

    check()


@pytest.mark.parametrize("d", range(1, 13))
def test_laplace_tight_equals_twice_attained_row_mass(d: int) -> None:
    ones = np.ones(d)
    # linear: x = 1, y = 1 attains the per-row L1 mass 1 + 2d + d(d+1)/2; so does x' = -1, y' = -1
    assert 2 * np.abs(row_vech("linear", ones, 1.0, True)).sum() == laplace_sensitivity_sum(
        "linear", d, variant="tight", release_beta=True)
    assert 2 * np.abs(row_vech("linear", -ones, -1.0, True)).sum() == laplace_sensitivity_sum(
        "linear", d, variant="tight", release_beta=True)
    assert 2 * np.abs(row_vech("linear", ones, 1.0, False)).sum() == laplace_sensitivity_sum(
        "linear", d, variant="tight")
    assert 2 * np.abs(row_vech("logistic", ones, 0.0, False)).sum() == pytest.approx(
        laplace_sensitivity_sum("logistic", d, variant="tight"), rel=1e-14)
    # D2: x = 1/sqrt(d) (||x||_1 = sqrt(d)), y = 1
    u = ones / math.sqrt(d)
    assert 2 * np.abs(row_vech("linear", u, 1.0, True)).sum() == pytest.approx(
        laplace_sensitivity_sum("linear", d, variant="tight", domain="l2", release_beta=True), rel=1e-12)
    assert 2 * np.abs(row_vech("logistic", u, 0.0, False)).sum() == pytest.approx(
        laplace_sensitivity_sum("logistic", d, variant="tight", domain="l2"), rel=1e-12)


@pytest.mark.parametrize("d", [1, 2, 5, 10])
def test_laplace_table_values(d: int) -> None:
    s = math.sqrt(d)
    assert laplace_sensitivity_sum("linear", d, release_beta=True) == 2 * (1 + d) ** 2
    assert laplace_sensitivity_sum("linear", d) == 2 * (1 + d) ** 2 - 2
    assert laplace_sensitivity_sum("linear", d, variant="tight", release_beta=True) == d * d + 5 * d + 2
    assert laplace_sensitivity_sum("linear", d, variant="tight", domain="l2", release_beta=True) == pytest.approx(
        d + 4 * s + 3)
    assert laplace_sensitivity_sum("logistic", d, variant="zhang") == d * d / 4 + 3 * d
    assert laplace_sensitivity_sum("logistic", d, variant="xu") == d * d / 4 + d
    assert laplace_sensitivity_sum("logistic", d, variant="paper") == d * d / 4 + d
    assert laplace_sensitivity_sum("logistic", d, variant="tight") == pytest.approx(d + d * (d + 1) / 8)
    assert laplace_sensitivity_sum("logistic", d, variant="tight", domain="l2") == pytest.approx(s + (d + 1) / 8)


def test_xu_logistic_bound_breaks_with_pm1_labels_but_zhang_holds() -> None:
    # spec §1.2: |1/2 - y| = 3/2 for y = -1; Xu's d^2/4 + d is exceeded, Zhang's d^2/4 + 3d is not
    d = 4
    x = np.ones(d)
    # alpha = (1/2 - y) x with y = -1 on both rows: |3/2 x_a - (-3/2 x_a)| = 3 per coordinate, M unchanged
    diff = l1_diff("logistic", x, -1.0, -x, -1.0)
    assert diff == 3 * d
    assert diff > laplace_sensitivity_sum("logistic", d, variant="xu")
    assert diff <= laplace_sensitivity_sum("logistic", d, variant="zhang")


# ----------------------------------------------------------------------------- block table (spec §1.3)
def _partitions(d: int, k: int):
    for cuts in itertools.combinations(range(1, d), k - 1):
        bounds = (0, *cuts, d)
        yield [bounds[i + 1] - bounds[i] for i in range(k)]


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_block_table_sums_equal_section_1_2(model: str) -> None:
    for d in range(1, 9):
        for k in range(1, min(d, 4) + 1):
            for counts in _partitions(d, k):
                for beta in (False, True):
                    plan = DissectionPlan(counts, 0, model=model, release_beta=beta)
                    total = sum(laplace_block_table_sum(plan).values())
                    assert total == pytest.approx(
                        laplace_sensitivity_sum(model, d, variant="tight", release_beta=beta), rel=1e-14)


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_xu_closed_forms_dominate_table_for_all_partitions_up_to_12(model: str) -> None:
    n_checked = 0
    for d in range(1, 13):
        for k in range(1, d + 1):   # every composition of d into k parties (2^(d-1) per d)
            for counts in _partitions(d, k):
                label = (d + k) % k      # the label owner moves around the parties
                plan = DissectionPlan(counts, label, model=model, release_beta=(model == "linear"))
                for party in range(k):
                    dk = counts[party]
                    table = laplace_party_sensitivity_sum(plan, party)
                    xu = xu_party_sensitivity_sum(plan, party)
                    gap = dk * (dk - 1) if model == "linear" else dk / 8 * (2 * d - dk - 1)
                    assert xu == pytest.approx(table + gap, abs=1e-9), (counts, party)
                    assert xu >= table - 1e-12
                    n_checked += 1
    assert n_checked == sum(2 ** (d - 2) * (d + 1) for d in range(2, 13)) + 1


def test_xu_closed_forms_paper_values() -> None:
    plan = DissectionPlan([3, 2], 0, model="linear", release_beta=True)
    d = 5
    assert xu_party_sensitivity_sum(plan, 0) == 2 * (1 + 2 * d + 3 * d)
    assert xu_party_sensitivity_sum(plan, 1) == 2 * (2 * 2 + 2 * d)
    plan = DissectionPlan([3, 2], 1, model="logistic")
    assert xu_party_sensitivity_sum(plan, 1) == d + 2 * (2 * d - 2) / 4
    assert xu_party_sensitivity_sum(plan, 0) == 3 + 3 * (2 * d - 3) / 4


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("counts,label_owner", [([2, 3], 0), ([1, 2, 2], 1), ([0, 2, 1], 0), ([3], 0)])
def test_per_party_and_per_block_bounds_hold(model: str, counts: list[int], label_owner: int) -> None:
    """Changing party k's block (and y if k owns the label) moves the release <= Delta^(k), each block <= 2 m_B."""
    plan = DissectionPlan(counts, label_owner, model=model, release_beta=True)
    d = plan.n_features
    iu = np.triu_indices(d)

    def block_vectors(x, y):
        alpha = row_alpha(model, x, y)
        M = row_matrix(model, x)
        out = {}
        for b in plan.blocks:
            if b.kind == "beta":
                out[b.name] = np.array([y * y])
            elif b.kind == "alpha":
                out[b.name] = alpha[plan.index(b)[0]]
            elif b.parties[0] == b.parties[1]:
                sub = M[plan.index(b)]
                out[b.name] = sub[np.triu_indices(sub.shape[0])]
            else:
                out[b.name] = M[plan.index(b)].ravel()
        return out

    @SETTINGS
    @given(linf_row(d, model), linf_row(d, model), st.integers(0, len(counts) - 1))
    def check(t1, t2, party):
        (x, y), (x2, y2) = t1, t2
        x2 = np.where(np.isin(np.arange(d), np.arange(d)[plan.feature_slices[party]]), x2, x)
        if party != label_owner:
            y2 = y
        v1, v2 = block_vectors(x, y), block_vectors(x2, y2)
        total = 0.0
        for b in plan.blocks:
            diff = float(np.abs(v1[b.name] - v2[b.name]).sum())
            assert diff <= 2 * block_l1_mass(plan, b) + 1e-9, b.name
            if party not in b.depends_on:
                assert diff == 0.0, f"block {b.name} moved although party {party} is not in depends_on"
            total += diff
        assert total <= laplace_party_sensitivity_sum(plan, party) + 1e-9
        assert iu[0].size == sum(v1[b.name].size for b in plan.blocks if b.kind == "M")

    check()


# ============================================================================ Gaussian (spec §2.2, §2.6)
def test_gaussian_table_values() -> None:
    n = 1000
    assert gaussian_sensitivities("linear", n) == {"alpha": 4 / n, "M": math.sqrt(2) / n}
    assert gaussian_sensitivities("linear", n, release_beta=True) == {"beta": 1 / n, "alpha": 4 / n,
                                                                        "M": math.sqrt(2) / n}
    assert gaussian_sensitivities("logistic", n) == {"alpha": 1 / n, "M": math.sqrt(2) / (8 * n)}
    assert gaussian_sensitivities("logistic", n, paper=True)["M"] == 1 / (8 * n)
    assert gaussian_sensitivities("linear", n, paper=True)["M"] == 1 / n


def test_gaussian_delta2_attained_by_e1_e2_not_spectral() -> None:
    d = 5
    e1, e2 = np.eye(d)[0], np.eye(d)[1]
    A = np.outer(e1, e1) - np.outer(e2, e2)
    iu = np.triu_indices(d)
    assert np.linalg.norm(A, "fro") == pytest.approx(math.sqrt(2), abs=1e-15)
    assert np.linalg.norm(A[iu]) == pytest.approx(math.sqrt(2), abs=1e-15)
    assert np.linalg.norm(A, 2) == pytest.approx(1.0)  # the paper's spectral bound, too small by sqrt(2)
    n = 7
    assert gaussian_sensitivities("linear", n)["M"] == pytest.approx(np.linalg.norm(A, "fro") / n, rel=1e-15)
    assert gaussian_sensitivities("logistic", n)["M"] == pytest.approx(np.linalg.norm(A / 8, "fro") / n, rel=1e-15)
    # Delta_1 attained by y = 1, x = u vs y' = -1, x' = u (linear); y = 0 vs 1 (logistic)
    u = _unit(np.arange(1.0, d + 1))
    assert np.linalg.norm(row_alpha("linear", u, 1.0) - row_alpha("linear", u, -1.0)) / n == pytest.approx(
        gaussian_sensitivities("linear", n)["alpha"], rel=1e-14)
    assert np.linalg.norm(row_alpha("logistic", u, 0.0) - row_alpha("logistic", u, 1.0)) / n == pytest.approx(
        gaussian_sensitivities("logistic", n)["alpha"], rel=1e-14)


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("d", [1, 2, 5, 12])
def test_gaussian_random_neighbours_never_exceed(model: str, d: int) -> None:
    n = 10
    sens = gaussian_sensitivities(model, n, release_beta=True)
    iu = np.triu_indices(d)

    @SETTINGS
    @given(l2_row(d, model), l2_row(d, model))
    def check(t1, t2):
        (x, y), (x2, y2) = t1, t2
        assert np.linalg.norm(row_alpha(model, x, y) - row_alpha(model, x2, y2)) / n <= sens["alpha"] * (1 + 1e-12)
        A = row_matrix(model, x) - row_matrix(model, x2)
        assert np.linalg.norm(A, "fro") / n <= sens["M"] * (1 + 1e-12) + 1e-15   # iso layout
        assert np.linalg.norm(A[iu]) / n <= sens["M"] * (1 + 1e-12) + 1e-15      # mirror (vech) layout
        if model == "linear":
            assert abs(y * y - y2 * y2) / n <= sens["beta"]
        # relaxed FM: whole vector, ordered full matrix (spec §5.3)
        full = np.concatenate([[y * y] if model == "linear" else [], row_alpha(model, x, y),
                               row_matrix(model, x).ravel()])
        full2 = np.concatenate([[y2 * y2] if model == "linear" else [], row_alpha(model, x2, y2),
                                row_matrix(model, x2).ravel()])
        assert np.linalg.norm(full - full2) / n <= relaxed_sensitivity(model, d, n) * (1 + 1e-12)

    check()


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("d", [1, 3, 6])
def test_relaxed_dinf_never_exceeded(model: str, d: int) -> None:
    n = 3

    @SETTINGS
    @given(linf_row(d, model), linf_row(d, model))
    def check(t1, t2):
        (x, y), (x2, y2) = t1, t2
        full = np.concatenate([[y * y] if model == "linear" else [], row_alpha(model, x, y),
                               row_matrix(model, x).ravel()])
        full2 = np.concatenate([[y2 * y2] if model == "linear" else [], row_alpha(model, x2, y2),
                                row_matrix(model, x2).ravel()])
        assert np.linalg.norm(full - full2) / n <= relaxed_sensitivity(model, d, n, domain="linf") * (1 + 1e-12)

    check()
    # attained by x = 1, y = 1 vs x' = -1, y' = -1 ... except for terms that cannot flip sign; check the formula
    assert relaxed_sensitivity("linear", 1, 1, domain="l2") == pytest.approx(2 * math.sqrt(6))
    assert relaxed_sensitivity("logistic", 1, 1, domain="l2") == pytest.approx(math.sqrt(17) / 4)


# ----------------------------------------------------------------------------- g(r) (spec §2.6)
@pytest.mark.parametrize("r2,expected", [(0.1, 0.8485), (0.25, 1.2247), (0.4, 1.3856), (0.5, 1.4142),
                                         (0.7, 1.4142), (1.0, 1.4142)])
def test_g_reference_values(r2: float, expected: float) -> None:
    assert partial_block_frobenius(math.sqrt(r2)) == pytest.approx(expected, abs=1e-4)


def _g_numeric(r: float, dk: int = 2, drest: int = 2, starts: int = 12) -> float:
    """Maximise ||x x^T - x' x'^T||_F over x = (u, v), x' = (u', v), ||u||, ||u'|| <= r, ||x||, ||x'|| <= 1."""
    rng = np.random.default_rng(0)

    def project(z):
        u, u2, v = z[:dk], z[dk:2 * dk], z[2 * dk:]
        u = u * min(1.0, r / max(np.linalg.norm(u), 1e-300))
        u2 = u2 * min(1.0, r / max(np.linalg.norm(u2), 1e-300))
        room = 1.0 - max(u @ u, u2 @ u2)
        v = v * min(1.0, math.sqrt(max(room, 0.0)) / max(np.linalg.norm(v), 1e-300))
        return u, u2, v

    def neg(z):
        u, u2, v = project(z)
        x, x2 = np.concatenate([u, v]), np.concatenate([u2, v])
        return -np.linalg.norm(np.outer(x, x) - np.outer(x2, x2), "fro")

    best = 0.0
    for _ in range(starts):
        z0 = rng.normal(size=2 * dk + drest)
        res = optimize.minimize(neg, z0, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12,
                                                                        "maxiter": 20000})
        best = max(best, -res.fun)
    return best


@pytest.mark.parametrize("r2", [0.1, 0.25, 0.4, 0.6])
def test_g_matches_constrained_maximisation(r2: float) -> None:
    r = math.sqrt(r2)
    num = _g_numeric(r)
    g = partial_block_frobenius(r)
    assert num <= g + 1e-9
    assert num == pytest.approx(g, rel=1e-4)
    # attained by x = (u, v), x' = (-u, v) with ||u||^2 = min(r^2, 1/2), ||v||^2 = 1 - ||u||^2
    a = math.sqrt(min(r2, 0.5))
    x = np.array([a, 0.0, math.sqrt(1 - a * a)])
    x2 = np.array([-a, 0.0, math.sqrt(1 - a * a)])
    assert np.linalg.norm(np.outer(x, x) - np.outer(x2, x2), "fro") == pytest.approx(g, rel=1e-12)


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_gaussian_per_party_sensitivities(model: str) -> None:
    counts, L, n = [2, 3, 4], 1, 100
    plan = DissectionPlan(counts, L, model=model, release_beta=True)
    radii = np.sqrt(np.array(counts) / sum(counts))
    d = plan.n_features
    ms = 1.0 if model == "linear" else 1 / 8
    for k in range(3):
        s = gaussian_party_sensitivities(plan, k, n, radii, release_beta=(model == "linear"))
        g = partial_block_frobenius(radii[k])
        assert s["M"] == pytest.approx(ms * g / n)
        if k == L:
            assert s["alpha"] == pytest.approx((4.0 if model == "linear" else 1.0) / n)
            if model == "linear":
                assert s["beta"] == pytest.approx(1 / n)
        else:
            assert s["alpha"] == pytest.approx((4.0 if model == "linear" else 1.0) * radii[k] / n)
            if model == "linear":
                assert s["beta"] == 0.0
    rng = np.random.default_rng(5)
    # random search: changing party k's block (norm <= r_k), others fixed, never exceeds Delta^(k)
    for _ in range(3000):
        k = int(rng.integers(0, 3))
        sl = plan.feature_slices[k]
        x = np.concatenate([_unit(rng.normal(size=c)) * radii[j] * rng.uniform(0.5, 1) ** 0.1
                            for j, c in enumerate(counts)])
        x2 = x.copy()
        x2[sl] = _unit(rng.normal(size=counts[k])) * radii[k] * rng.uniform(0, 1) ** 0.1
        if rng.random() < 0.3:
            x2[sl] = -x[sl]
        y = float(rng.choice([0.0, 1.0]) if model == "logistic" else rng.choice([-1.0, 1.0]))
        y2 = y if k != L else float(rng.choice([0.0, 1.0]) if model == "logistic" else -y)
        s = gaussian_party_sensitivities(plan, k, n, radii)
        assert np.linalg.norm(row_alpha(model, x, y) - row_alpha(model, x2, y2)) / n <= s["alpha"] * (1 + 1e-12)
        assert np.linalg.norm(row_matrix(model, x) - row_matrix(model, x2), "fro") / n <= s["M"] * (1 + 1e-12)
    assert d == 9
