"""vfl.rng, the one seeding policy (issue 13 item 4): ChaCha20 from OS entropy unless the user passes a seed."""

from __future__ import annotations

import numpy as np
import pytest

import vfl.rng as vrng
from vfl.rng import is_secure, is_seeded, make_rng, randomness_source, secure_generator, spawn


def test_default_is_chacha20_keyed_with_256_os_bits(monkeypatch) -> None:
    g = make_rng()
    assert is_secure(g) and type(g.bit_generator).__name__ == "ChaCha"
    state = g.bit_generator.state["state"]
    assert state["rounds"] == 20 and list(state["ctr"]) == [0, 0]
    key = int.from_bytes(np.asarray(state["keysetup"], dtype="<u4").tobytes(), "little")
    assert key.bit_length() > 200            # 256 random bits (probability < 2^-55 of failing by chance)
    fixed = (1 << 255) | 12345
    monkeypatch.setattr(vrng.secrets, "randbits", lambda bits: fixed if bits == 256 else 0)
    k2 = int.from_bytes(np.asarray(make_rng().bit_generator.state["state"]["keysetup"], dtype="<u4").tobytes(),
                        "little")
    assert k2 == fixed                       # the OS bits are the ChaCha key itself (no 128-bit seed hashing)


def test_unseeded_runs_never_share_noise_seeded_runs_reproduce() -> None:
    a, b = make_rng().normal(size=8), make_rng().normal(size=8)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(make_rng(3).normal(size=8), make_rng(3).normal(size=8))
    assert type(make_rng(3).bit_generator).__name__ == "PCG64"
    g = np.random.default_rng(0)
    assert make_rng(g) is g


def test_spawn_secure_children_are_fresh_chacha_streams_seeded_children_reproduce() -> None:
    kids = spawn(secure_generator(), 3)
    assert all(is_secure(k) for k in kids)
    draws = [k.integers(0, 2**62) for k in kids]
    assert len(set(draws)) == 3
    s1 = [k.normal() for k in spawn(make_rng(9), 2)]
    s2 = [k.normal() for k in spawn(make_rng(9), 2)]
    assert s1 == s2 and s1[0] != s1[1]


def test_bad_random_state_and_report_strings() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        make_rng(-1)
    with pytest.raises(TypeError, match="random_state"):
        make_rng("seed")
    assert not is_seeded(None) and is_seeded(0)
    assert "ChaCha20" in randomness_source(None) and "OS entropy" in randomness_source(None)
    assert "PCG64" in randomness_source(4) and "reproducible" in randomness_source(4)


def test_chacha_normal_moments() -> None:
    """Sanity of the float path the mechanisms use: mean/variance of 10^6 normals (|z| < 6.1: ~1e-9 per check)."""
    z = secure_generator().normal(size=1_000_000)
    assert abs(z.mean()) < 6.1e-3 and abs(z.var() - 1.0) < 6.1 * np.sqrt(2.0 / 1e6)
