"""A flood of PSI_POINTS chunks against a real `vfl party --id` process (review of issue 34's streamed ring).

Invariant: what a party holds for PSI chunks it has not re-blinded yet is bounded by the counts its co-parties
signed, and the threads it runs do not grow with the number of chunks. Attackers: (a) a hostile coordinator, which
holds no pinned key, sends thousands of unsigned PSI_POINTS while the party blinds its own list; (b) a pinned
co-party sends its honestly signed list in one-point chunks (a valid list, thousands of messages).

On the tree before this test (e71c55e) a party checked a chunk only when its worker reached it and started one
thread per received message: (a) the party held ~1,500 threads and every unsigned chunk before it refused the first
one, (b) ~1,500 threads. Now a chunk is checked on the receive thread before it is queued, and the queued chunks
are re-blinded by one task at a time.

The party (alice) pins "bob"; the test holds bob's key to sign what bob would send. FAST: 1024-bit INSECURE
Paillier test keys (no product is reached); alice's 30,000 IDs keep her worker busy for about a second while the
chunks arrive.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from helpers.psi_victim import bob_registration, one_error_line, psi_victim

from vfl.net.messages import MessageType

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

ALICE_IDS = [f"user{i:06d}" for i in range(30_000)]
FLOOD = 1_500
#: main thread, ZeroMQ's I/O and reaper threads, the worker chain, the blinding pool (usable cores), heartbeats:
#: a few dozen at most, whatever the number of chunks
MAX_THREADS = 40


class PeakThreads:
    """Samples ``Threads:`` of /proc/PID/status every 2 ms on a background thread; :attr:`peak` is the largest."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/status") as fh:
                    for line in fh:
                        if line.startswith("Threads:"):
                            self.peak = max(self.peak, int(line.split()[1]))
            except OSError:
                return
            time.sleep(0.002)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@pytest.fixture
def victim(tmp_path):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc to count a process's threads")
    with psi_victim(tmp_path, ALICE_IDS) as started:
        yield started


def test_unsigned_chunks_from_a_hostile_coordinator_are_refused_before_they_are_queued(victim):
    """(a): the first unsigned chunk stops alice with one line (exit code 4) on her receive thread; the flood
    after it never becomes threads or queued work, and nothing of bob's is re-blinded."""
    fake, proc, bob = victim
    peer, alice_reg = fake.register(timeout=120)
    start = {"index": 0, "parties": 2, "registrations": [alice_reg, bob_registration(bob)]}
    junk = bytes(range(32))   # one point, no signature: only the coordinator's word
    peak = PeakThreads(proc.pid)
    fake.send(peer, MessageType.PSI_START, start)
    for _ in range(FLOOD):
        fake.send(peer, MessageType.PSI_POINTS, {"origin": 1, "hops": 1, "offset": 0}, [junk])
    got = fake.wait_for(MessageType.ERROR, timeout=120)
    _, err = proc.communicate(timeout=120)
    threads = peak.stop()
    assert got is not None and "the PSI list of party 'bob'" in got[1].body["reason"], got
    assert proc.returncode == 4, err
    assert "the PSI list of party 'bob'" in one_error_line(err)
    assert not [m for m in fake.sent_by_party(MessageType.PSI_POINTS) if m.body["origin"] == 1]
    assert threads <= MAX_THREADS, f"alice ran {threads} threads for {FLOOD} chunks"


def test_a_list_in_one_point_chunks_costs_no_thread_per_chunk(victim):
    """(b): bob's honestly signed list of 1,500 points in 1,500 one-point chunks is re-blinded in order, chunk by
    chunk, and alice's threads stay a few dozen."""
    from vfl.protocols.alignment import PsiRing
    from vfl.secure.psi import POINT_BYTES, BlindingKey

    fake, proc, bob = victim
    peer, alice_reg = fake.register(timeout=120)
    start = {"index": 0, "parties": 2, "registrations": [alice_reg, bob_registration(bob, FLOOD)]}
    ring = PsiRing.from_start(start, index=1, name=None, n_ids=FLOOD, pinned=None, run=fake.run_id)
    points = BlindingKey().blind([f"bob{i:05d}" for i in range(FLOOD)])
    chunks = []
    for off in range(FLOOD):
        body, blob = {"origin": 1, "hops": 1, "offset": off}, points[off * POINT_BYTES:(off + 1) * POINT_BYTES]
        chunks.append((body | {"auth": bob.sign(ring.list_digest(body, blob))}, blob))
    peak = PeakThreads(proc.pid)
    fake.send(peer, MessageType.PSI_START, start)
    for body, blob in chunks:
        fake.send(peer, MessageType.PSI_POINTS, body, [blob])
    back: list = []
    own = 0
    deadline = time.monotonic() + 240
    while (len(back) < FLOOD or own < len(ALICE_IDS)) and time.monotonic() < deadline:
        got = fake.wait_for(MessageType.PSI_POINTS, MessageType.ERROR, timeout=5)
        if got is None:
            continue
        assert got[1].type is MessageType.PSI_POINTS, got
        if got[1].body["origin"] == 1:
            back.append(got[1])
        else:
            own += len(got[1].blob(0)) // POINT_BYTES
    threads = peak.stop()
    assert [m.body["offset"] for m in back] == list(range(FLOOD)) and own == len(ALICE_IDS)
    assert all(m.body["hops"] == 2 and len(m.blob(0)) == POINT_BYTES for m in back)
    assert proc.poll() is None   # waits for its PSI_RESULT
    assert threads <= MAX_THREADS, f"alice ran {threads} threads for {FLOOD} chunks"
