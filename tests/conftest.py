"""Shared fixtures (tests mirror the package layout; see docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

#: 1024-bit INSECURE Paillier keys: fast tests only (users get >= 2048 bits)
FAST_INSECURE_KEYS = {"key_bits": 1024, "allow_insecure_keys": True}


#: party names the tests run; each has a throwaway Ed25519 identity in :func:`identity_dir`, pinned by all of them
TEST_PARTY_NAMES = ("alice", "bob", "carol", "dave", "a", "b", "c")


@pytest.fixture(scope="session", autouse=True)
def ledger_home(tmp_path_factory: pytest.TempPathFactory):
    """Every party ledger of the session (``vfl party`` without --ledger, also in child processes) lives in a temp
    directory ($VFL_LEDGER, vfl.privacy.ledger.default_ledger_path): tests never touch the user's data directory."""
    import os

    folder = tmp_path_factory.mktemp("ledgers")
    previous = os.environ.get("VFL_LEDGER")
    os.environ["VFL_LEDGER"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("VFL_LEDGER", None)
    else:
        os.environ["VFL_LEDGER"] = previous


@pytest.fixture(scope="session")
def identity_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``vfl party --identity-dir`` / ``PartyNode(identity_dir=...)`` for :data:`TEST_PARTY_NAMES`: every party's
    NAME.sign.secret and the NAME.sign.pub of all (vfl.secure.identity, as `vfl keys` writes them)."""
    from vfl.secure.identity import write_identities

    folder = tmp_path_factory.mktemp("identities")
    write_identities(folder, TEST_PARTY_NAMES)
    return folder


@pytest.fixture
def fast_insecure_keys() -> dict:
    """Keyword arguments for 1024-bit INSECURE test keys (RunSettings / vfl.fit)."""
    return dict(FAST_INSECURE_KEYS)


@pytest.fixture
def rng() -> np.random.Generator:
    """A fixed-seed generator: reproducible test data (never privacy noise a user would get)."""
    return np.random.default_rng(20260)


@pytest.fixture
def vertical_split(rng: np.random.Generator):
    """Two parties' columns in [-1, 1] (3 and 1 features) and a linear label in [-1, 1] held by the first."""
    X = rng.uniform(-1, 1, (80, 4))
    y = np.clip(X @ np.array([0.4, -0.3, 0.2, 0.1]) + 0.05 * rng.normal(size=80), -1, 1)
    return [X[:, :3], X[:, 3:]], y
