"""vfl.net.runtime pieces without sockets: the member's in-order worker (the roles' loops are tested with real
processes in test_network_roles, test_cape_network, test_scoring_network, test_waiting_notices, test_hostile_peers)."""

from __future__ import annotations

import threading
import time

import pytest

from vfl.exceptions import ProtocolError
from vfl.net.messages import Message, MessageType
from vfl.net.runtime import OrderedWorker


def _msg(i: int) -> Message:
    return Message(MessageType.HEARTBEAT, {}, [str(i).encode()])


def _drain_until(worker: OrderedWorker, n: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 120   # outer limit on a loaded machine; ends as soon as n arrived
    while len(got) < n and time.monotonic() < deadline:
        got += worker.drain()
        time.sleep(0.01)
    return got


def test_tasks_finish_in_submission_order_whatever_their_length():
    """A slow task submitted first still delivers first (a share never overtakes the block before it)."""
    w = OrderedWorker("t", lambda item: _msg(item))
    release = threading.Event()
    w.submit(lambda: (release.wait(120), [1])[1])
    w.submit(lambda: [2, 3])
    time.sleep(0.05)
    assert w.drain() == []            # the second task waits for the first
    release.set()
    assert [bytes(m.payload[0]) for m in _drain_until(w, 3)] == [b"1", b"2", b"3"]


def test_a_failure_is_raised_on_the_loop_thread_after_what_came_before():
    """What a task finished before it failed is still handed over (sent), then the failure is raised."""
    w = OrderedWorker("t", lambda item: _msg(item))

    def bad():
        yield 1
        raise ProtocolError("bad block")

    w.submit(bad)
    deadline = time.monotonic() + 120
    got: list[Message] = []
    with pytest.raises(ProtocolError, match="bad block"):
        while time.monotonic() < deadline:
            got += w.drain()
            time.sleep(0.01)
    assert [bytes(m.payload[0]) for m in got] == [b"1"]


def test_no_task_starts_after_a_failed_one():
    """Issue 34: the tasks after a failed task run on its broken state (a chunk generator that raised): they never
    start, so the party reports the one failure, not a second traceback (seen as 'generator raised StopIteration'
    after a Dask worker was lost)."""
    w = OrderedWorker("t", lambda item: _msg(item))
    ran = threading.Event()

    def bad():
        raise ProtocolError("bad block")
        yield 0   # a generator, like the phases' tasks

    w.submit(bad)
    w.submit(lambda: (ran.set(), [1])[1])
    deadline = time.monotonic() + 120
    with pytest.raises(ProtocolError, match="bad block"):
        while time.monotonic() < deadline:
            w.drain()
            time.sleep(0.01)
    assert w.join(120)   # the second task has ended (skipped)
    assert not ran.is_set()


def test_no_task_starts_after_stop():
    w = OrderedWorker("t", lambda item: _msg(item))
    release, ran = threading.Event(), threading.Event()
    w.submit(lambda: (release.wait(120), [])[1])
    w.submit(lambda: (ran.set(), [1])[1])
    w.stop()
    release.set()
    time.sleep(0.2)
    assert not ran.is_set() and w.drain() == []


def test_a_worker_failure_is_raised_before_the_next_hub_message_is_handled():
    """Invariant: a member whose work failed ends its run with that failure, whatever the hub sends next (as
    PartyNode's own loop did before the runtime: it sent what came before the failure, then raised in the same
    pass). Attacker: a hub (real ZeroMQ sockets, the real codec) that answers at once with the message that ends the
    member's run (a RESULT). On main the member sent the item before the failure, handled the queued RESULT and
    returned normally: the failure was swallowed (the party's ledger said "completed")."""
    from vfl.net.runtime import Done, Member
    from vfl.net.transport import ClientTransport, ServerTransport

    class Failing(Member):
        timeout, log = 120.0, staticmethod(lambda s: None)

        def __init__(self) -> None:
            self.work = OrderedWorker("t", lambda item: _msg(item))

        def register_body(self) -> dict:
            return {"name": "alice", "n_rows": 1, "features": ["a"], "label_owner": False}

        def on_message(self, t, msg):
            if msg.type is MessageType.RESULT:
                return Done("model")
            if msg.type is MessageType.WELCOME:
                def bad():
                    yield 1
                    raise ProtocolError("bad block")
                self.work.submit(bad)
                assert self.work.join(120)   # the item and the failure are both queued before the next drain
            return []

        def outgoing(self):
            return self.work.drain()

    hub = ServerTransport("tcp://127.0.0.1:0", run_id="ab" * 16)
    t = ClientTransport(hub.endpoint, name="alice")
    result: dict = {}

    def member() -> None:
        try:
            result["value"] = Failing().serve(t)
        except ProtocolError as exc:
            result["error"] = exc

    runner = threading.Thread(target=member)
    runner.start()
    try:
        got = None
        deadline = time.monotonic() + 120
        while got is None and time.monotonic() < deadline:
            got = hub.recv(0.5)
        assert got is not None and got[1].type is MessageType.REGISTER
        peer = got[0]
        hub.bind_peer(peer, "alice")
        hub.send(peer, Message(MessageType.WELCOME, {"run": hub.run_id}))
        hub.send(peer, Message(MessageType.RESULT, {"model": {}}))   # queued behind WELCOME: handled next
        runner.join(120)
    finally:
        t.close()
        hub.close()
    assert not runner.is_alive()
    assert "value" not in result, "the member returned normally after its work failed"
    assert "bad block" in str(result.get("error"))


def test_strangers_leave_no_per_peer_state_in_the_hubs_transport():
    """Invariant: what a hub keeps of peers that are not its members is bounded (the refusals, at most
    MAX_REFUSED_PEERS records), however many connections a stranger opens. Attacker: anyone who reaches the hub's
    port (no CURVE), opening a new connection per attempt and sending on each a HEARTBEAT, an ERROR and a REGISTER the
    hub refuses. On main the transport kept a last-seen time and a sequence number for every such peer, forever (a
    long-lived scoring service grew with every connection); now a stray's state is dropped once it is answered."""
    from vfl.net.runtime import Hub
    from vfl.net.transport import ClientTransport, ServerTransport

    class Refusing(Hub):
        def __init__(self) -> None:
            self.init_hub(ServerTransport("tcp://127.0.0.1:0", run_id="ab" * 16), timeout=120)

        def admit(self, peer, msg):
            self.refuse(peer, "no", run_goes_on=True)

    hub = Refusing()
    n = 30
    try:
        for i in range(n):
            stranger = ClientTransport(hub.transport.endpoint, name="mallory")
            try:
                stranger.send(Message(MessageType.HEARTBEAT))
                stranger.send(Message(MessageType.ERROR, {"reason": "x", "error": "PartyFailure"}))
                stranger.send(Message(MessageType.REGISTER, {"name": "mallory", "n_rows": 1, "features": ["a"],
                                                             "label_owner": False}))
                deadline = time.monotonic() + 120
                while len(hub.refused) <= i and time.monotonic() < deadline:
                    hub.receive(0.2)
                assert len(hub.refused) == i + 1
            finally:
                stranger.close()
        kept = len(hub.transport.last_seen) + len(hub.transport._peer_seq) + len(hub.transport.peer_keys)
    finally:
        hub.transport.close()
    assert kept == 0, f"{kept} per-peer records kept for {n} strangers"


def test_one_worker_thread_and_a_bounded_queue_whatever_is_submitted():
    """Invariant: a member runs its tasks on one thread and holds at most ``max_pending`` of them waiting.
    Attacker (in process): a hub whose messages each become a task, sent while the worker is busy. On main every
    task was a thread of its own (50 waiting tasks: 50 threads) and nothing bounded them."""
    w = OrderedWorker("t", lambda item: _msg(item), max_pending=50)
    release = threading.Event()
    before = threading.active_count()
    w.submit(lambda: (release.wait(120), [0])[1])
    for i in range(1, 50):
        w.submit(lambda i=i: [i])
    assert threading.active_count() <= before + 1   # the one worker thread
    with pytest.raises(ProtocolError, match="more than 50 tasks wait for this member's worker"):
        w.submit(lambda: [50])
    release.set()
    assert w.join(120)
    assert [bytes(m.payload[0]) for m in w.drain()] == [str(i).encode() for i in range(50)]   # in order, all of them
    w.submit(lambda: [99])   # room again once they ran
    assert [bytes(m.payload[0]) for m in _drain_until(w, 1)] == [b"99"]
    w.stop()
