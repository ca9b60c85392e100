"""One injectable source of randomness.

Noise is drawn from a :class:`numpy.random.Generator`. By default it is seeded from the operating
system's CSPRNG (``secrets``), so two runs never share noise; a fixed seed is used only when the user
passes ``random_state`` (reproducible experiments), and that is flagged in privacy reports.
Cryptographic values (masks, Paillier randomness, key-agreement secrets) never come from here: they
use :mod:`secrets` directly.
"""

from __future__ import annotations

import secrets

import numpy as np

RandomState = int | np.random.Generator | None


def make_rng(random_state: RandomState = None) -> np.random.Generator:
    """Return a Generator: fresh OS entropy for ``None``, seeded for an int, passed through for a Generator."""
    if random_state is None:
        return np.random.default_rng(secrets.randbits(128))
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


def spawn(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """Independent child generators (one per party/block), so no noise draw is ever reused."""
    return [np.random.default_rng(s) for s in rng.bit_generator.seed_seq.spawn(n)] if hasattr(
        rng.bit_generator, "seed_seq"
    ) else [np.random.default_rng(rng.integers(0, 2**63)) for _ in range(n)]
