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


def test_no_task_starts_after_stop():
    w = OrderedWorker("t", lambda item: _msg(item))
    release, ran = threading.Event(), threading.Event()
    w.submit(lambda: (release.wait(120), [])[1])
    w.submit(lambda: (ran.set(), [1])[1])
    w.stop()
    release.set()
    time.sleep(0.2)
    assert not ran.is_set() and w.drain() == []
