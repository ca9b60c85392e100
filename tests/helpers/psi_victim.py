"""A real `vfl party --id` process (alice) against a fake coordinator, for the PSI attack tests (issue 20's
membership oracle, issue 34's chunk attacks): alice holds :data:`IDS`, has a throwaway identity and pins "bob"; the
test holds bob's key only to sign what the real bob would have sent (his registration, his honest chunks).
FAST: 1024-bit INSECURE Paillier test keys (no product is ever reached)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.fake_coordinator import FakeCoordinator
from vfl.protocols.roster import sign_registration
from vfl.secure.identity import SigningIdentity, write_identities

IDS = [f"user{i:05d}" for i in range(60)]
BOB_COUNT = 40


def bob_registration(bob: SigningIdentity, n_rows: int = BOB_COUNT) -> dict:
    """Bob's signed registration, as the coordinator received it from the real bob."""
    return sign_registration(bob, {"name": "bob", "n_rows": n_rows, "features": ["b1"], "label_owner": False,
                                   "row_ids": True})


@contextmanager
def psi_victim(tmp_path: Path, ids: list[str] = IDS) -> Iterator[tuple[FakeCoordinator, subprocess.Popen,
                                                                     SigningIdentity]]:
    """Start alice (row IDs ``ids``) against a fake coordinator; yields (fake, process, bob identity); kills what is
    left after."""
    (tmp_path / "alice.csv").write_text("id,y,a1\n" + "".join(f"{u},0.1,0.2\n" for u in ids))
    (tmp_path / "bounds.toml").write_text("[bounds]\ny = [-1.0, 1.0]\na1 = [-1.0, 1.0]\n")
    certs = tmp_path / "alice_certs"
    write_identities(certs, ["alice"])
    bob = SigningIdentity.generate("bob")              # bob's secret stays with "bob" (the test), not in certs
    (certs / "bob.sign.pub").write_text(bob.public_hex + "\n")
    fake = FakeCoordinator()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vfl.cli", "party", "--connect", fake.endpoint, "--name", "alice",
         "--data", str(tmp_path / "alice.csv"), "--features", "a1", "--label", "y", "--id", "id",
         "--bounds", str(tmp_path / "bounds.toml"), "--identity-dir", str(certs), "--no-progress",
         "--timeout", "60", "--insecure-test-keys"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield fake, proc, bob
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        fake.close()


def one_error_line(err: str) -> str:
    """The one `vfl: error` line of a role's stderr (and no traceback)."""
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("vfl: error")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
