"""Throwaway Ed25519 identities for the CAPE site tests (``vfl keys`` writes the same files; vfl.protocols.cape_keys).

Not a test module (no ``test_`` prefix): ``site_identities(tmp)`` returns a directory holding ``NAME.sign.secret`` and
``NAME.sign.pub`` of every name the tests use (site0 ... site5, a ... d), so every site pins every other one.
"""

from __future__ import annotations

from pathlib import Path

from vfl.secure.identity import SECRET_SUFFIX, write_identities

__all__ = ["SITE_NAMES", "site_identities"]

SITE_NAMES = (*(f"site{i}" for i in range(6)), "a", "b", "c", "d")


def site_identities(directory: Path | str, names: tuple[str, ...] = SITE_NAMES) -> str:
    """``directory/identities`` with an identity per name (written once; existing keys are kept)."""
    out = Path(directory) / "identities"
    write_identities(out, [n for n in names if not (out / f"{n}{SECRET_SUFFIX}").exists()])
    return str(out)
