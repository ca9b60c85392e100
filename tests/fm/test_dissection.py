"""Dissection plan: reassembly == centralized coefficients; roles of every block (spec §1.3, §2.6)."""

from __future__ import annotations

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.objective import fm_objective


def _random_partition(rng: np.random.Generator, d: int, k: int, label_owner_has_features: bool,
                      label_owner: int) -> list[int]:
    """Random feature counts of k parties summing to d; all parties >= 1 except possibly the label owner."""
    while True:
        counts = rng.multinomial(d, np.ones(k) / k).tolist()
        others_ok = all(c >= 1 for j, c in enumerate(counts) if j != label_owner)
        if others_ok and ((counts[label_owner] >= 1) == label_owner_has_features):
            return counts


CASES = [(k, lhf, seed) for k in range(1, 6) for lhf in (True, False) for seed in range(4) if not (k == 1 and not lhf)]


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("k,label_has_features,seed", CASES)
def test_reassembly_equals_centralized(model: str, k: int, label_has_features: bool, seed: int) -> None:
    rng = np.random.default_rng(seed * 31 + k)
    d = int(rng.integers(k, 12))
    label_owner = int(rng.integers(0, k))
    counts = _random_partition(rng, d, k, label_has_features, label_owner)
    n = 50
    X = rng.uniform(-1, 1, size=(n, d))
    y = rng.integers(0, 2, size=n).astype(float) if model == "logistic" else rng.uniform(-1, 1, size=n)
    plan = DissectionPlan(counts, label_owner, model=model, release_beta=True)
    parts = [X[:, s] for s in plan.feature_slices]
    central = fm_objective(X, y, model)
    values = {b.name: plan.block_value(b, parts, y) for b in plan.blocks}
    re = plan.assemble(values)
    assert re.beta == pytest.approx(central.beta, rel=1e-13)
    np.testing.assert_allclose(re.alpha, central.alpha, rtol=0, atol=1e-13)
    np.testing.assert_allclose(re.M, central.M, rtol=0, atol=1e-13)
    assert np.array_equal(re.M, re.M.T)
    # split of the centralized objective gives the same blocks
    split = plan.split(central)
    for b in plan.blocks:
        np.testing.assert_allclose(split[b.name], values[b.name], rtol=0, atol=1e-13)
    # block bookkeeping: every alpha_a and every unordered pair {a, b} of M is released exactly once (vech)
    covered_alpha = np.zeros(d, int)
    pairs: dict[tuple[int, int], int] = {}
    for b in plan.blocks:
        idx = plan.index(b)
        if b.kind == "alpha":
            covered_alpha[idx[0]] += 1
        elif b.kind == "M":
            rows, cols = range(d)[idx[0]], range(d)[idx[1]]
            for a in rows:
                for c in cols:
                    if b.parties[0] == b.parties[1] and c < a:
                        continue
                    key = (min(a, c), max(a, c))
                    pairs[key] = pairs.get(key, 0) + 1
    assert (covered_alpha == 1).all()
    assert len(pairs) == d * (d + 1) // 2 and set(pairs.values()) == {1}


def test_roles_of_blocks() -> None:
    plan = DissectionPlan([2, 3, 1], label_owner=1, model="linear", release_beta=True)
    names = [b.name for b in plan.blocks]
    assert names == ["beta", "alpha[0]", "alpha[1]", "alpha[2]", "M[0,0]", "M[0,1]", "M[0,2]", "M[1,1]",
                     "M[1,2]", "M[2,2]"]
    assert plan.block("beta").depends_on == {1} and not plan.block("beta").cross
    assert plan.block("alpha[1]").depends_on == {1} and not plan.block("alpha[1]").cross
    a0 = plan.block("alpha[0]")
    assert a0.depends_on == {0, 1} and a0.cross
    assert {a0.noised_by, a0.encryptor} == {0, 1}
    m01 = plan.block("M[0,1]")
    assert m01.cross and m01.depends_on == {0, 1} and m01.shape == (2, 3)
    # the party that does not hold the key adds the noise inside the ciphertext (spec §1.3 [correction])
    assert m01.noised_by != m01.encryptor and m01.responder == m01.noised_by
    assert plan.block("M[2,2]").noised_by == 2 and plan.block("M[2,2]").responder is None
    assert {b.name for b in plan.single_party_blocks(1)} == {"beta", "alpha[1]", "M[1,1]"}
    assert {b.name for b in plan.blocks_of(2)} == {"alpha[2]", "M[0,2]", "M[1,2]", "M[2,2]"}
    assert len(plan.cross_blocks()) == 5
    table = plan.describe()
    assert table[0]["name"] == "beta" and table[5]["depends_on"] == [0, 1]


def test_logistic_never_releases_beta_and_label_owner_without_features() -> None:
    plan = DissectionPlan([0, 2, 2], label_owner=0, model="logistic", release_beta=True)
    assert not plan.release_beta
    names = [b.name for b in plan.blocks]
    assert names == ["alpha[1]", "alpha[2]", "M[1,1]", "M[1,2]", "M[2,2]"]
    assert all(plan.block(f"alpha[{k}]").depends_on == {0, k} for k in (1, 2))
    assert plan.assemble({n: np.zeros(plan.block(n).shape) for n in names}).beta == pytest.approx(np.log(2))


def test_bad_plans_and_assembly() -> None:
    with pytest.raises(ConfigurationError):
        DissectionPlan([])
    with pytest.raises(ConfigurationError, match="feature counts"):
        DissectionPlan([0, 0])
    with pytest.raises(ConfigurationError, match="label owner"):
        DissectionPlan([1, 2], label_owner=2)
    plan = DissectionPlan([1, 2])
    with pytest.raises(ConfigurationError, match="missing blocks"):
        plan.assemble({"alpha[0]": np.zeros(1)})
    vals = {b.name: np.zeros(b.shape) for b in plan.blocks}
    vals["M[0,1]"] = np.zeros((2, 1))
    with pytest.raises(ConfigurationError, match="shape"):
        plan.assemble(vals)
