"""Issue 34: the C buckets' eight-lane AVX-512 IFMA products (vfl/secure/_ifma52.h) against GMP's and the Python loops.

The IFMA buckets hold radix-2^52 numbers below 2m and correct the combination by ``2^(64 n D + 52 nd (E - D))``
instead of ``R^E``; these tests check that the products, and the multiplication counts, are exactly those of the GMP
buckets (``simd=False``) and of :class:`fastmath.BucketAccumulator`, on random and edge inputs (a row per call,
rows split into chunks, zero and all-ones exponents, bases 0 and 1, fewer products than lanes, moduli of one digit
to 4096 bits) and on real Paillier products (small INSECURE keys), exact against numpy. Skipped where the CPU lacks
IFMA or the C loops are not built (the GMP path is then the only one, tested in test_secure_native.py).
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from vfl.secure import generate_keypair, native
from vfl.secure.fastmath import BucketAccumulator
from vfl.secure.products import secure_gram

HAVE_IFMA = native.fastloops is not None and bool(getattr(native.fastloops, "IFMA", 0))
needs_ifma = pytest.mark.skipif(not HAVE_IFMA, reason=f"no AVX-512 IFMA C loops: {native.IMPLEMENTATION}")
pytestmark = needs_ifma


def _run(kind: str, n_products_shape: tuple[int, int], window: int, bits: int, modulus: int,
         bases: list[int], exps: np.ndarray, chunk: int) -> tuple[list[int], int]:
    """Products ``k n_groups + g`` of ``bases`` (rows x groups) with exponents (rows x columns), added in chunks."""
    n_cols, n_groups = n_products_shape
    rows = exps.shape[0]
    width = (modulus.bit_length() + 7) // 8
    if kind == "python":
        acc: object = BucketAccumulator(n_cols * n_groups, bits, window, modulus)
    else:
        acc = native.CBucketAccumulator(n_cols * n_groups, bits, window, modulus, simd=(kind == "ifma"))
        assert acc.simd == (kind == "ifma")
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        frame = b"".join(int(b).to_bytes(width, "big") for b in bases[start * n_groups:stop * n_groups])
        acc.add_frame(frame, width, n_groups, exps[start:stop])
    return [int(acc.result(p)) for p in range(n_cols * n_groups)], int(acc.mults)


def _plain(modulus: int, bases: list[int], exps: np.ndarray, n_groups: int) -> list[int]:
    out = []
    for k in range(exps.shape[1]):
        for g in range(n_groups):
            v = 1
            for i in range(exps.shape[0]):
                v = v * pow(bases[i * n_groups + g], int(exps[i, k]), modulus) % modulus
            out.append(v)
    return out


@pytest.mark.parametrize(("mod_bits", "n_cols", "n_groups", "window", "bits", "rows", "chunk"), [
    (61, 5, 2, 4, 12, 150, 37),      # one 52-bit digit too few: nd = 2
    (512, 1, 1, 8, 8, 40, 40),       # one product, one window: forced simd with a single lane per batch
    (1024, 1, 1, 5, 10, 90, 7),      # 2 positions per row
    (1024, 3, 2, 7, 7, 60, 60),      # 6 positions per row: fewer than the eight lanes
    (2048, 4, 1, 6, 12, 200, 64),    # exactly 8 positions per row
    (4096, 10, 1, 9, 26, 300, 128),  # the 10 x 10 shape's layout on a 4096-bit modulus (n^2 of a 2048-bit key)
])
def test_ifma_buckets_equal_gmp_and_python_on_random_and_edge_inputs(mod_bits, n_cols, n_groups, window, bits,
                                                                     rows, chunk):
    rng = random.Random(mod_bits * 1000 + n_cols)
    modulus = rng.getrandbits(mod_bits) | 1 | (1 << (mod_bits - 1))
    bases = [rng.randrange(modulus) for _ in range(rows * n_groups)]
    bases[0], bases[1] = 0, 1                              # edge bases
    bases[-1] = modulus - 1
    exps = np.array([[rng.getrandbits(bits) for _ in range(n_cols)] for _ in range(rows)], dtype=np.uint64)
    exps[2, :] = 0                                         # a row without any digit
    exps[3, :] = (1 << bits) - 1                           # every digit at its maximum
    exps[4:9, 0] = exps[9, 0]                              # the same bucket six rows in a row
    want = _plain(modulus, bases, exps, n_groups)
    runs = {kind: _run(kind, (n_cols, n_groups), window, bits, modulus, bases, exps, chunk)
            for kind in ("ifma", "gmp", "python")}
    assert runs["ifma"][0] == want
    assert runs["ifma"] == runs["gmp"] == runs["python"]   # products and multiplication counts


def test_ifma_buckets_with_one_row_per_call_and_an_empty_product():
    rng = random.Random(7)
    modulus = rng.getrandbits(1536) | 1 | (1 << 1535)
    bases = [rng.randrange(modulus) for _ in range(30)]
    exps = np.array([[rng.getrandbits(9), 0] for _ in range(30)], dtype=np.uint64)   # product 1: every exponent 0
    ifma = _run("ifma", (2, 1), 3, 9, modulus, bases, exps, 1)
    assert ifma == _run("python", (2, 1), 3, 9, modulus, bases, exps, 1)
    assert ifma[0][1] == 1 and ifma[0][0] == _plain(modulus, bases, exps, 1)[0]


def test_the_default_uses_ifma_only_where_a_row_fills_the_lanes_and_no_ifma_variable_turns_it_off():
    m = (1 << 1023) + 1155
    assert native.CBucketAccumulator(4, 26, 13, m).simd                # 4 products x 2 windows = 8 lanes
    assert not native.CBucketAccumulator(1, 26, 13, m).simd            # y^T X: one column, two windows
    out = subprocess.run([sys.executable, "-c", "from vfl.secure import native; "
                          f"print(native.CBucketAccumulator(4, 26, 13, {m}).simd, native.IMPLEMENTATION)"],
                         env={**__import__("os").environ, "VFL_NO_IFMA": "1"}, capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("False") and "IFMA" not in out
    assert "IFMA" in native.IMPLEMENTATION


def test_a_product_with_ifma_buckets_is_exact_against_numpy_with_negative_values(monkeypatch):
    made: list[native.CBucketAccumulator] = []

    class Spy(native.CBucketAccumulator):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(native, "CBucketAccumulator", Spy)
    pk, sk = generate_keypair(1024, allow_insecure=True)
    rng = np.random.default_rng(34)
    A, B = rng.uniform(-1, 1, (700, 6)), rng.uniform(-1, 1, (700, 5))
    A[:3] = -1.0
    B[:3] = 1.0
    B[3:6] = -1.0
    got = secure_gram(A, B, key_bits=1024, precision_bits=16, keypair=(pk, sk), allow_insecure=True, workers=1)
    assert made and any(acc.simd for acc in made)   # per-chunk tasks: the columns of a chunk together
    scale = 2 ** 16
    want = (np.round(A * scale).astype(np.int64).T.astype(object) @ np.round(B * scale).astype(np.int64)
            .astype(object)) / float(scale * scale)
    assert np.array_equal(np.asarray(got, dtype=float), np.asarray(want, dtype=float))


def test_another_thread_runs_while_the_ifma_buckets_work():
    """The IFMA loop runs without the GIL, like the GMP loop: a party's heartbeat thread keeps ticking."""
    rng = random.Random(3)
    modulus = rng.getrandbits(4096) | 1 | (1 << 4095)
    rows, width = 3000, 512
    frame = b"".join(rng.randrange(modulus).to_bytes(width, "big") for _ in range(rows))
    exps = np.array([[rng.getrandbits(26) for _ in range(10)] for _ in range(rows)], dtype=np.uint64)
    acc = native.CBucketAccumulator(10, 26, 13, modulus, simd=True)
    ticks: list[float] = []
    done = threading.Event()

    def ticker() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.002)

    t = threading.Thread(target=ticker)
    t.start()
    start = time.perf_counter()
    acc.add_frame(frame, width, 1, exps)
    took = time.perf_counter() - start
    done.set()
    t.join()
    inside = [x for x in ticks if start < x < start + took]
    assert len(inside) >= 3, (took, len(inside))


@pytest.mark.parametrize("n_groups", [1, 2, 3])
def test_a_per_chunk_task_with_the_columns_together_equals_one_multiexp_per_column(monkeypatch, n_groups):
    """multiexp_rows_task (per-chunk tasks: Dask, process pools, short products) puts the columns that share a window
    in one IFMA bucket set; the products and the count are those of fastmath.multiexp per column and group."""
    from vfl.secure import executors

    rng = random.Random(n_groups)
    modulus = rng.getrandbits(2048) | 1 | (1 << 2047)
    width, rows = 256, 130
    frame = b"".join(rng.randrange(modulus).to_bytes(width, "big") for _ in range(rows * n_groups))
    exps = np.array([[rng.getrandbits(18) for _ in range(5)] for _ in range(rows)], dtype=np.int64)
    exps[:, 3] = 0                                   # an all-zero column
    exps[:, 4] >>= 9                                 # a column with shorter exponents: a window of its own
    together = executors.multiexp_rows_task(modulus, frame, width, n_groups, exps)
    monkeypatch.setenv("VFL_NO_IFMA", "1")
    assert executors._ifma_columns(modulus, frame, width, n_groups, [[1]], exps, []) is None
    assert executors.multiexp_rows_task(modulus, frame, width, n_groups, exps) == together


def _tables(p: int, q: int, hs: int, window: int = 6):
    return (native.CFixedBaseTable(hs % (p * p), p * p, 256, window),
            native.CFixedBaseTable(hs % (q * q), q * q, 256, window))


@pytest.mark.parametrize("count", [1, 7, 8, 9, 17])
def test_crt_encrypt_eight_at_a_time_gives_the_bytes_of_the_gmp_loop_and_of_pow(monkeypatch, count):
    """crt_encrypt on IFMA lanes (whole batches of eight, the rest one at a time) against the GMP loop (VFL_NO_IFMA
    at table construction) and plain (1 + m n) h_s^alpha mod n^2, with zero and all-ones exponents, m = 0 and n - 1."""
    pk, sk = generate_keypair(1024, allow_insecure=True)
    n, p, q = pk.n, sk.p, sk.q
    n2, rng = n * n, random.Random(count)
    hs = pow(rng.randrange(2, n) ** 2 % n, n, n2)
    alphas = [rng.getrandbits(256) for _ in range(count)]
    plains = [rng.randrange(n) for _ in range(count)]
    alphas[0], plains[0] = 0, n - 1
    if count > 1:
        alphas[-1], plains[-1] = (1 << 256) - 1, 0
    inv = pow(p * p, -1, q * q)
    ifma = native.crt_encrypt(*_tables(p, q, hs), plains, alphas, n, inv, 256)
    monkeypatch.setenv("VFL_NO_IFMA", "1")
    gmp = native.crt_encrypt(*_tables(p, q, hs), plains, alphas, n, inv, 256)
    want = b"".join(((1 + m * n) * pow(hs, a, n2) % n2).to_bytes(256, "big")
                    for m, a in zip(plains, alphas, strict=True))
    assert ifma == gmp == want


def test_crt_encrypt_on_ifma_lanes_refuses_what_the_gmp_loop_refuses():
    pk, sk = generate_keypair(1024, allow_insecure=True)
    n, p, q = pk.n, sk.p, sk.q
    hs = pow(7, n, n * n)
    inv = pow(p * p, -1, q * q)
    tables = _tables(p, q, hs)
    with pytest.raises(ValueError, match="not below n"):
        native.crt_encrypt(*tables, [1] * 5 + [n] + [1] * 10, [3] * 16, n, inv, 256)
    with pytest.raises(ValueError, match="more bits than the tables"):
        native.crt_encrypt(*tables, [1] * 16, [3] * 12 + [1 << 260] + [3] * 3, n, inv, 256)
