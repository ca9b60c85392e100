"""Issue 34: a party's Dask workers keep their Pippenger buckets across chunks, as the local pool's workers do
(:class:`vfl.secure.dask_pool.DaskPinnedPool`), and a lost Dask worker stops the run with one line.

Invariants: (1) on a Dask cluster given by address, the responder's product is bit-identical to the local pool's
(request frames, response, both shares), exact against numpy, and counts the local pool's multiplications (buckets
kept), not the per-chunk count a plain ``client.get_executor()`` gives; (2) when a worker process that holds a
fold's buckets is killed (SIGKILL) the fold fails with :class:`~vfl.exceptions.WorkerStalled` naming that worker,
never a hang (before issue 34 such tasks, had they been pinned, would wait in Dask's ``no-worker`` state) and never
a product without its buckets; (3) through the CLI, a party whose Dask worker dies exits non-zero with one
readable line. Real LocalClusters with worker processes, real (1024-bit, INSECURE test) Paillier keys.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers.streamed_product import streamed_product

from vfl.exceptions import WorkerStalled
from vfl.secure import ProductEncryptor, ProductResponder, generate_keypair
from vfl.secure.encoding import to_fixed_point_ints
from vfl.secure.executors import open_executor
from vfl.secure.keys import ciphertext_byte_length
from vfl.secure.products import EncryptedChunk, ProductStreamHeader

distributed = pytest.importorskip("dask.distributed")
pytestmark = [pytest.mark.network, pytest.mark.timeout(900)]   # outer limit on a loaded machine
P = 24


@pytest.fixture(scope="module")
def keypair():
    return generate_keypair(1024, allow_insecure=True)


def _exact(A, B):
    return to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0))


def _seed(monkeypatch, value: int) -> None:
    rnd = random.Random(value)
    monkeypatch.setattr(secrets, "randbits", rnd.getrandbits)
    monkeypatch.setattr(secrets, "randbelow", rnd.randrange)
    monkeypatch.setattr(secrets, "token_hex", lambda n=16: rnd.randbytes(n).hex())


def _cluster(workers: int = 2, processes: bool = True):
    # worker processes (the party's deployment; a killed one is restarted by its nanny at a new address)
    return distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes,
                                    dashboard_address=None)


@pytest.mark.parametrize("processes", [True, False], ids=["worker-processes", "threaded-workers"])
def test_dask_workers_keep_buckets_bit_identical_to_the_local_pool(keypair, monkeypatch, processes):
    """Threaded workers share one process: their buckets are kept apart by slot (dask_pool.run_in_slot)."""
    rng = np.random.default_rng(34)
    A, B = rng.uniform(-1, 1, (480, 3)), rng.uniform(-1, 1, (480, 4))
    limit = 40 * ciphertext_byte_length(keypair[0])   # 12 chunks of 40 rows

    def run(**kw):
        r = streamed_product(keypair, A, B, max_frame_bytes=limit, precision_bits=P, **kw)
        return r, (r.frames, r.response.ciphertexts, r.share_a.tolist(), r.share_b.tolist(), r.total.tolist())

    streamed_product(keypair, A[:5], B[:5], max_frame_bytes=limit)   # the key's per-process encrypter exists
    _seed(monkeypatch, 11)
    pool, pool_bytes = run(workers=2)
    with _cluster(processes=processes) as cluster:
        _seed(monkeypatch, 11)
        kept, kept_bytes = run(executor=cluster.scheduler_address)
        with distributed.Client(cluster) as client:
            _seed(monkeypatch, 11)
            per_chunk, per_chunk_bytes = run(executor=client.get_executor(pure=False))
    assert kept_bytes[4] == _exact(A, B).tolist()
    assert kept_bytes == pool_bytes == per_chunk_bytes   # frames, response, both shares, the product
    assert kept.stats["workers"] == pool.stats["workers"] == 2
    # the same buckets as the local pool's workers (same columns per worker, same window): the same count,
    # below one multi-exponentiation per chunk per task
    assert kept.stats["multiexp_mults"] == pool.stats["multiexp_mults"] < per_chunk.stats["multiexp_mults"]


def _fold_until_killed(keypair, address: str, kill) -> tuple[BaseException | None, float]:
    """Both roles in this process on the Dask cluster at ``address``; ``kill()`` after the third chunk was folded
    into the workers' buckets. Returns what the fold raised (None if it returned a product) and the seconds taken."""
    rng = np.random.default_rng(7)
    A, B = rng.uniform(-1, 1, (400, 2)), rng.uniform(-1, 1, (400, 4))
    pk, sk = keypair
    limit = 40 * ciphertext_byte_length(pk)
    with open_executor(address, 1) as ex:
        holder = ProductEncryptor(sk, A, response_cols=4, precision_bits=P, executor=ex, max_frame_bytes=limit)
        responder = ProductResponder(B, precision_bits=P, executor=ex)
        header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
        fold = responder.open(header)
        start = time.monotonic()
        try:
            for chunk in holder.encrypted_chunks():
                fold.add(EncryptedChunk.from_wire(*chunk.to_wire(), header))
                if chunk.index == 2:
                    while fold._pending:   # the first three chunks are in the workers' buckets
                        fold._fold_one()
                    kill()
            fold.finish()
        except Exception as exc:
            fold.close()
            return exc, time.monotonic() - start
    return None, time.monotonic() - start


def test_a_killed_dask_worker_fails_the_fold_with_one_line_naming_it(keypair):
    with _cluster() as cluster, distributed.Client(cluster) as client:
        pids = client.run(os.getpid)   # {address: pid} of the worker processes
        victim = sorted(pids)[1]
        exc, seconds = _fold_until_killed(keypair, cluster.scheduler_address,
                                          lambda: os.kill(pids[victim], signal.SIGKILL))
    assert isinstance(exc, WorkerStalled), repr(exc)
    assert f"Dask worker 1 ({victim}) left the cluster" in str(exc) and "\n" not in str(exc)
    assert seconds < 600   # detected, not waited out (the watcher polls every second)


def test_a_healthy_cluster_is_not_failed_by_the_watcher(keypair):
    """The control of the test above: the same fold, nothing killed, returns the exact product's response."""
    with _cluster() as cluster:
        exc, _ = _fold_until_killed(keypair, cluster.scheduler_address, lambda: None)
    assert exc is None


@pytest.mark.slow
def test_a_cli_party_whose_dask_worker_dies_exits_non_zero_with_one_line(tmp_path, identity_dir):
    """Real `vfl coordinator` and two `vfl party` processes; bob runs its secure products on a Dask cluster
    (`--executor`) whose worker processes this test kills by pid once bob's buckets are in them."""
    from helpers.waiting import read_until, start_up_seconds

    from vfl.demo import free_port, make_demo_data

    data = make_demo_data(tmp_path / "data", 20_000, seed=3)   # 1 250 chunks per product: the kill lands mid-run
    url = f"tcp://127.0.0.1:{free_port()}"
    cli = [sys.executable, "-m", "vfl.cli"]
    procs: list[subprocess.Popen] = []

    def start(*args):
        procs.append(subprocess.Popen([*cli, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        return procs[-1]

    common = ["--no-progress", "--insecure-test-keys", "--bounds", str(data["bounds"]), "--identity-dir",
              str(identity_dir), "--allow-mechanisms", "none", "--rows-aligned", "--max-frame-bytes", "4096",
              "--timeout", "120"]
    with _cluster() as cluster, distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        try:
            start("coordinator", "--parties", "2", "--bind", url, "--key-bits", "1024", "--insecure-test-keys",
                  "--timeout", str(round(60 + 4 * start_up_seconds())), "--mechanism", "none",
                  "--precision-bits", "32", "--no-fit-intercept", "--out", str(tmp_path / "model.json"))
            read_until(procs[0], "listening on")
            start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                  "age:tenure", "--label", "score", "--workers", "1", *common)
            bob = start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                        "visits,spend", "--executor", cluster.scheduler_address, *common)

            def buckets_filled() -> int:   # bucket tasks the scheduler has seen, in any state
                return client.run_on_scheduler(lambda dask_scheduler: sum(
                    sum(p.states.values()) for name, p in dask_scheduler.task_prefixes.items()
                    if name == "bucket_add_task"))

            deadline = time.monotonic() + 600
            while buckets_filled() < 3 and bob.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert bob.poll() is None, bob.communicate()
            assert buckets_filled() >= 3, "bob's products never reached the Dask workers"
            for pid in pids.values():
                os.kill(pid, signal.SIGKILL)
            out, err = bob.communicate(timeout=600)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate()
    assert bob.returncode not in (0, None)
    lines = [line for line in err.splitlines() if line.startswith("vfl: error:")]
    assert len(lines) == 1 and "Dask worker" in lines[0] and "the run is stopped" in lines[0], err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert not (tmp_path / "model.json").exists()
