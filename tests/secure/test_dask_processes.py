"""The Dask executor on a real cluster started from the command line (issue 25): ``dask scheduler`` and two
``dask worker tcp://127.0.0.1:PORT`` processes, not a LocalCluster. A streamed secure product with
``executor="tcp://127.0.0.1:PORT"`` is exact against numpy and bit-identical to the local process pool.

1024-bit INSECURE test keys; seeded stand-ins for :mod:`secrets` in this process only (every random draw is made
by the calling process, so equal seeds must give equal bytes on every executor).
"""

from __future__ import annotations

import importlib.util
import random
import secrets
from pathlib import Path

import numpy as np
import pytest
from helpers.streamed_product import streamed_product

from vfl.secure import generate_keypair
from vfl.secure.encoding import to_fixed_point_ints
from vfl.secure.keys import ciphertext_byte_length

pytestmark = [pytest.mark.network, pytest.mark.slow]
P = 24
ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_parallel_scaling", ROOT / "benchmarks" / "parallel_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seed(monkeypatch, value: int) -> None:
    rnd = random.Random(value)
    monkeypatch.setattr(secrets, "randbits", rnd.getrandbits)
    monkeypatch.setattr(secrets, "randbelow", rnd.randrange)
    monkeypatch.setattr(secrets, "token_hex", lambda n=16: rnd.randbytes(n).hex())


def _product(keypair, A, B, executor=None, workers=1):
    r = streamed_product(keypair, A, B, max_frame_bytes=16 * ciphertext_byte_length(keypair[0]), precision_bits=P,
                         executor=executor, workers=workers)
    return r.frames, r.response.ciphertexts, r.share_a.tolist(), r.share_b.tolist(), r.total.tolist()


def test_command_line_dask_cluster_gives_the_local_pools_bytes_and_the_exact_product(monkeypatch):
    pytest.importorskip("dask.distributed")
    keypair = generate_keypair(1024, allow_insecure=True)
    rng = np.random.default_rng(25)
    A, B = rng.uniform(-1, 1, (90, 3)), rng.uniform(-1, 1, (90, 4))   # 6 chunks of 16 rows
    _product(keypair, A[:5], B[:5])   # the key's per-process encrypter (its h_s draw) exists before seeding
    _seed(monkeypatch, 5)
    local = _product(keypair, A, B, workers=2)
    with _bench().DaskProcesses(2) as cluster:
        from dask.distributed import Client

        with Client(cluster.address, timeout=120) as client:
            assert len(client.scheduler_info()["workers"]) == 2
            assert all(p.poll() is None for p in cluster.procs)
        _seed(monkeypatch, 5)
        remote = _product(keypair, A, B, executor=cluster.address)
        cpu = cluster.workers_cpu_seconds()
        procs = list(cluster.procs)
    assert remote[4] == (to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0))).tolist()
    assert remote == local   # request frames, response ciphertexts, both shares, the product
    assert cpu > 0           # the work ran in the worker processes
    assert all(p.poll() is not None for p in procs)   # scheduler and workers are gone
