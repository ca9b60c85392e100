"""Module locks that a forked pool worker never inherits held (issue 30).

Local pool workers are started with ``fork`` (:mod:`vfl.secure.executors`): a 2-worker pool is ready in ~0.05 s and
~0.02 CPU-s, where ``forkserver`` and ``spawn`` took ~2 s and up to 0.8 CPU-s here because each worker re-imports
the user's ``__main__`` (and fails outright in a script without an ``if __name__ == "__main__"`` guard). But the
process that forks has other threads: every party of ``vfl.fit`` is a thread, and a responder computes its
re-randomisers on a background thread. ``fork`` copies only the calling thread, so a lock another thread held at that
moment stays held in the child for ever; a worker whose first task took ``executors._TASK_LOCK`` then waited for ever,
and so did the run (4 of 30 garment fits in issue 30).

Every module-level lock of vfl is made by :func:`fork_safe_lock` (``tests/secure/test_fork_safety.py`` checks the
source for plain ``threading.Lock()`` at module level). :func:`os.register_at_fork` handlers acquire all of them
before any ``fork`` of this process (so the fork waits until no other thread is inside one of their critical
sections: the state they guard is consistent in the child) and release them again in the parent and the child, as
:mod:`logging` does for its own lock. Locks taken in a fixed order by one thread, and never nested by vfl code, cannot
deadlock with each other; no vfl code forks while holding one of them.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["fork_safe_lock"]

_LOCKS: list[Any] = []
_REGISTRY_LOCK = threading.Lock()   # guards _LOCKS itself; held only while appending, and around a fork


def fork_safe_lock() -> Any:
    """A new ``threading.Lock`` that no forked child of this process inherits in the held state."""
    lock = threading.Lock()
    with _REGISTRY_LOCK:
        _LOCKS.append(lock)
    return lock


def _acquire_all() -> None:
    _REGISTRY_LOCK.acquire()
    for lock in _LOCKS:
        lock.acquire()


def _release_all() -> None:
    for lock in reversed(_LOCKS):
        lock.release()
    _REGISTRY_LOCK.release()


if hasattr(os, "register_at_fork"):   # POSIX; elsewhere there is no fork
    os.register_at_fork(before=_acquire_all, after_in_parent=_release_all, after_in_child=_release_all)
