"""The one seeding policy: where every noise draw's randomness comes from.

* ``random_state=None`` (every user run): a :class:`numpy.random.Generator` over the **ChaCha20** stream
  cipher (``randomgen.ChaCha``, 20 rounds, Bernstein 2008) keyed with 256 fresh bits of OS entropy
  (:mod:`secrets`). ChaCha20 is a cryptographically secure generator: its output cannot be predicted
  from earlier output, unlike numpy's default PCG64, whose state is recoverable from a few outputs.
  Measured cost: ``benchmarks/rng_speed.py`` (docs/privacy.md, "Randomness").
* ``random_state=<int>``: a seeded PCG64 (reproducible experiments and tests); every report then says
  ``seeded: true`` and ``formal_dp: false`` (noise anyone can regenerate protects nothing).
* ``random_state=<Generator>``: used as given (the caller owns it); reports treat it as seeded.

Cryptographic values (masks, Paillier randomness, key-agreement secrets) never come from here: they use
:mod:`secrets` directly. The discrete samplers (:mod:`vfl.secure.discrete_noise`) draw integers only.
"""

from __future__ import annotations

import secrets

import numpy as np

try:  # ChaCha20 bit generator for numpy (maintained by numpy's random-module author)
    from randomgen import ChaCha as _ChaCha
except ImportError:  # pragma: no cover - randomgen is a core dependency
    _ChaCha = None

RandomState = int | np.random.Generator | None

__all__ = ["RandomState", "make_rng", "secure_generator", "is_seeded", "is_secure", "randomness_source", "spawn"]

CHACHA_ROUNDS = 20
KEY_BITS = 256


def secure_generator() -> np.random.Generator:
    """A ChaCha20 Generator keyed with 256 bits from the OS CSPRNG (the key is used directly, not hashed)."""
    if _ChaCha is None:  # pragma: no cover
        raise ImportError("randomgen is required for cryptographically seeded noise: pip install randomgen")
    return np.random.Generator(_ChaCha(key=secrets.randbits(KEY_BITS), counter=0, rounds=CHACHA_ROUNDS))


def make_rng(random_state: RandomState = None) -> np.random.Generator:
    """Fresh ChaCha20 from OS entropy for ``None``, seeded PCG64 for an int, a Generator passed through."""
    if random_state is None:
        return secure_generator()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError("random_state must be a non-negative integer")
        return np.random.default_rng(int(random_state))
    raise TypeError(f"random_state must be None, an int or a numpy Generator, not {type(random_state).__name__}")


def is_seeded(random_state: RandomState) -> bool:
    """True when the caller fixed the randomness (reports say so: the noise is reproducible)."""
    return random_state is not None


def is_secure(rng: np.random.Generator) -> bool:
    """True for a generator :func:`secure_generator` made (a ChaCha20 stream)."""
    return _ChaCha is not None and isinstance(rng.bit_generator, _ChaCha)


def randomness_source(random_state: RandomState) -> str:
    """One line for reports: where the noise came from."""
    if random_state is None:
        return f"ChaCha{CHACHA_ROUNDS} keyed from OS entropy (cryptographically secure)"
    if isinstance(random_state, np.random.Generator):
        return f"caller-supplied {type(random_state.bit_generator).__name__} generator (treated as seeded)"
    return f"PCG64 seeded with random_state={int(random_state)} (reproducible; not for release)"


def spawn(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """Independent child generators (one per party/block), so no noise draw is ever reused.

    Children of a secure generator are fresh ChaCha20 streams keyed from OS entropy; children of a seeded
    generator come from its SeedSequence (reproducible).
    """
    if is_secure(rng):
        return [secure_generator() for _ in range(n)]
    seed_seq = getattr(rng.bit_generator, "seed_seq", None)
    if isinstance(seed_seq, np.random.SeedSequence):
        return [np.random.default_rng(s) for s in seed_seq.spawn(n)]
    return [np.random.default_rng(rng.integers(0, 2**63)) for _ in range(n)]
