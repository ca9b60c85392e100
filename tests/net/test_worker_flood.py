"""A hostile coordinator cannot make a real `vfl party` start unboundedly many threads (vfl.net.runtime.OrderedWorker).

Invariant: a member's work runs on one worker thread with at most ``MAX_PENDING_TASKS`` tasks waiting, whatever its
hub sends. Attacker: a coordinator (tests/helpers/fake_coordinator.py, real ZeroMQ) that opens an honest-looking PSI
ring (alice's and bob's real signed registrations) and, while alice blinds her own list of IDs on her worker,
floods her with PSI_POINTS: every one becomes a task (it is checked on the worker, vfl.net.party.RowAlignment).
On main (bbf5d54) each task was a thread of its own, started at once and blocked on the one before: the party's
thread count grew with the flood (hundreds of threads); now it stays at its baseline and the party stops with one
line (the first unsigned list, or the bound).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.fake_coordinator import FakeCoordinator
from helpers.psi_victim import bob_registration

from vfl.net.messages import MessageType
from vfl.secure.identity import SigningIdentity, write_identities

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]

#: alice's IDs: one own chunk whose blinding keeps her worker busy for a second or more
N_IDS = 20_000
FLOOD = 1_500
#: the party's own threads (main, ZeroMQ I/O, blinding pool of at most 8, the worker) with room to spare; the flood
#: is 1 500 messages, so a thread per task is far above it
MAX_THREADS = 64


def _threads(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="thread count from /proc (Linux)")
def test_a_flood_of_psi_chunks_starts_no_thread_per_message(tmp_path):
    ids = [f"user{i:06d}" for i in range(N_IDS)]
    (tmp_path / "alice.csv").write_text("id,y,a1\n" + "".join(f"{u},0.1,0.2\n" for u in ids))
    (tmp_path / "bounds.toml").write_text("[bounds]\ny = [-1.0, 1.0]\na1 = [-1.0, 1.0]\n")
    certs = tmp_path / "certs"
    write_identities(certs, ["alice"])
    bob = SigningIdentity.generate("bob")
    (certs / "bob.sign.pub").write_text(bob.public_hex + "\n")
    fake = FakeCoordinator()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vfl.cli", "party", "--connect", fake.endpoint, "--name", "alice", "--data",
         str(tmp_path / "alice.csv"), "--features", "a1", "--label", "y", "--id", "id", "--bounds",
         str(tmp_path / "bounds.toml"), "--identity-dir", str(certs), "--no-progress", "--timeout", "300",
         "--insecure-test-keys"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    try:
        peer, alice_reg = fake.register(timeout=300)
        fake.send(peer, MessageType.PSI_START, {"index": 0, "parties": 2,
                                                "registrations": [alice_reg, bob_registration(bob)]})
        junk = b"\x09" * 32 * 40   # "bob's list" (40 points, bob's signed count), unsigned: refused on the worker
        for i in range(FLOOD):
            fake.send(peer, MessageType.PSI_POINTS, {"origin": 1, "hops": 1, "offset": 0}, [junk])
            if i % 50 == 0:
                peak = max(peak, _threads(proc.pid))
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            peak = max(peak, _threads(proc.pid))
            time.sleep(0.05)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        fake.close()
    lines = [ln for ln in err.splitlines() if ln.startswith("vfl: error")]
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in err, err
    assert "carries no valid signature" in lines[0] or "tasks wait for this member's worker" in lines[0], lines
    assert 0 < peak <= MAX_THREADS, peak   # on main: a thread per PSI_POINTS while the worker was busy
