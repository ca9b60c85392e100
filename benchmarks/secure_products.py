"""Benchmark: naive per-entry phe secure products vs vfl's packed, masked protocol (issue 3).

Usage::

    python benchmarks/secure_products.py            # naive run once on the forest shape (~2 min), all modes
    python benchmarks/secure_products.py --quick    # naive timed on a row subsample and extrapolated
    python benchmarks/secure_products.py --floor --out docs/data/secure_products_floor.json   # issue 25 (+ --large)

``--floor`` (issue 25): CPU µs per row (getrusage, self + children, median of ``--repeats``) of vfl's default
product on one worker, against the Paillier floor computed from unit costs measured in the same run (mulmod n^2 and
p^2 -- the cheapest of Python/gmpy2, GMP's mul + mod in C, the Montgomery product of vfl's C loops and, where the CPU
has AVX-512 IFMA, the eight-lane products of vfl's C buckets (issue 34) --,
serialisation, validation, re-randomisation, decryption; ``floor_us``), at the forest shape and 10^4 x 10 x 10
(``--large``: also 10^5 x 10 x 10), every run checked exact against numpy's integer product; the same products with
the pure-Python inner loops (``VFL_PURE_PYTHON``'s fallback), run alternately with the C ones; plus, side by side,
per-ciphertext gcd validation against the batched one and the former 40-bit slot slack against the 8-bit guard.
Issue 34: the floor's multi-exponentiation term is the best known method counted exactly on the run's exponents
(``vfl.secure.multiexp_counts``: bucket windows and the sorted-exponent method, per column), every method's count
per row and column is reported beside Pippenger's asymptotic ``H / lg H``, and the sorted-exponent method is run
against the bucket method in the Python loops on 10^4 rows (CPU, alternating, identical products).

Shapes: forest fires (n=517, 13 x 14) and n=10,000 (10 x 10), 2048-bit keys. For each run it prints
the wall time, the speed-up over naive, and the ratio to the *big-number floor*: the counted
big-integer operations of that run (encryptions, multiplications modulo n^2 in the bucket
multi-exponentiations, mask/re-randomisation encryptions, decryptions) times their per-operation
cost measured here in tight loops. A floor ratio near 1 means Python overhead is negligible.
The naive n=10,000 time is always extrapolated (it is linear in n: per-entry work only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from phe import paillier

from vfl.secure import (
    EncryptedBlock,
    MaskedResponse,
    ProductEncryptor,
    ProductResponder,
    executors,
    generate_keypair,
    native,
)
from vfl.secure.encoding import (
    DEFAULT_PRECISION_BITS,
    decode_products,
    encode_offset,
    inner_product_error_bound,
    to_fixed_point_ints,
)
from vfl.secure.executors import encrypt_rows_task
from vfl.secure.fastmath import (
    SHORT_EXPONENT_BITS,
    Encrypter,
    _multiexp_python,
    best_bucket_window,
    best_table_window,
    mpz,
    multiexp_cost,
    persistent_bucket_window,
    powmod,
)
from vfl.secure.keys import ciphertext_byte_length, ciphertexts_from_bytes, ciphertexts_to_bytes, validate_ciphertext
from vfl.secure.multiexp_counts import multi_output_counts, multiexp_sorted
from vfl.secure.packing import DEFAULT_GUARD_BITS
from vfl.secure.products import RERANDOMISATION, EncryptedChunk, ProductStreamHeader, combine_packed_shares

P = DEFAULT_PRECISION_BITS


def naive_protocol(A: np.ndarray, B: np.ndarray, pk: paillier.PaillierPublicKey,
                   sk: paillier.PaillierPrivateKey) -> tuple[np.ndarray, float]:
    """The per-entry phe protocol: Enc(a_ij) for every entry, sum_i Enc(a_ij) * b_ik, decrypt."""
    t0 = time.perf_counter()
    enc = [[pk.encrypt(float(x)) for x in row] for row in A]
    d_a, d_b = A.shape[1], B.shape[1]
    out = np.empty((d_a, d_b))
    for j in range(d_a):
        for k in range(d_b):
            acc = enc[0][j] * float(B[0, k])
            for i in range(1, A.shape[0]):
                acc = acc + enc[i][j] * float(B[i, k])
            out[j, k] = sk.decrypt(acc)
    return out, time.perf_counter() - t0


def _best_per_call(fn, calls: int, batches: int = 5) -> float:
    """Seconds per call: minimum over ``batches`` batches (robust to other load on shared cores)."""
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def per_op_costs(pk: paillier.PaillierPublicKey, sk: paillier.PaillierPrivateKey,
                 randomness: str) -> dict[str, float]:
    """Seconds per big-number operation, measured in tight loops on full-size random operands."""
    rng = np.random.default_rng(0)
    n2 = mpz(pk.nsquare)
    xs = [mpz(int(pk.encrypt(int(rng.integers(1, 2**62))).ciphertext())) for _ in range(64)]
    mul = _best_per_call(lambda i: xs[i & 63] * xs[(i + 1) & 63] % n2, 4000)
    holder = Encrypter(pk.n, p=sk.p, q=sk.q, randomness=randomness)
    if randomness == "standard":
        enc = _best_per_call(holder.encrypt, 20)   # CRT randomness
    else:   # a short-exponent rho without a fixed-base table: one 256-bit powmod modulo n^2
        alphas = [int.from_bytes(rng.bytes(SHORT_EXPONENT_BITS // 8), "big") for _ in range(64)]
        enc = _best_per_call(lambda i: powmod(holder.h_s, alphas[i & 63], n2), 20)
    resp = Encrypter(pk.n, randomness=RERANDOMISATION)  # the responder always re-randomises full-size
    rerand = _best_per_call(lambda i: resp.rerandomise(xs[i & 63]), 5)
    dec = _best_per_call(lambda i: sk.raw_decrypt(int(xs[i & 63])), 10)
    return {"mul": mul, "enc": enc, "rerand": rerand, "dec": dec}


def ours(A: np.ndarray, B: np.ndarray, keypair: tuple, *, randomness: str, workers: int,
         precompute: bool = False, repeats: int = 2) -> dict[str, float]:
    """Best of ``repeats`` runs (after per-key setup is cached) of the packed protocol."""
    runs = [_ours_once(A, B, keypair, randomness=randomness, workers=workers, precompute=precompute)
            for _ in range(repeats)]
    return min(runs, key=lambda r: r["time"])


def _ours_once(A: np.ndarray, B: np.ndarray, keypair: tuple, *, randomness: str, workers: int,
               precompute: bool) -> dict[str, float]:
    """One run of the packed protocol through the wire format; times and operation counts."""
    pk, sk = keypair
    holder = ProductEncryptor(sk, A, response_cols=B.shape[1], precision_bits=P, randomness=randomness, workers=workers)
    responder = ProductResponder(B, precision_bits=P, randomness=randomness, workers=workers)
    offline = 0.0
    if precompute:
        t0 = time.perf_counter()
        holder.precompute_randomness(workers=workers)
        offline = time.perf_counter() - t0
    t0 = time.perf_counter()
    header, frames = holder.request().to_wire()
    response, share_b = responder.respond(EncryptedBlock.from_wire(header, frames, pk))
    header, frames = response.to_wire()
    share_a = holder.decrypt(MaskedResponse.from_wire(header, frames, pk))
    online = time.perf_counter() - t0
    # what the coordinator does with the two packed shares (range-checked), against exact integers and numpy
    total = combine_packed_shares(share_a, share_b, layout=holder.layout, n_cols=holder.n_cols, modulus=int(pk.n))
    exact = total.tolist() == to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0)).tolist()
    err = np.max(np.abs(decode_products(total, P) - A.T @ B))
    return {"time": online, "offline": offline, "err": float(err), "exact": exact, "rows": A.shape[0], **holder.stats,
            **{f"resp_{k}": v for k, v in responder.stats.items()}}


def holder_encryption_seconds(run: dict, randomness: str, costs: dict[str, float], precomputed: bool) -> float:
    """Per-encryption floor: 1 mulmod with precomputed randomness; for short-exponent randomness the windows of the
    fixed-base table the encryption tasks build (the library's choice for the run's largest task,
    ``Encrypter.prepare``) + 1 mulmods, or one 256-bit powmod when no table pays; the measured CRT encryption for
    standard randomness.

    (The table lives in the executor task's encrypter, not in the party's cached one: reading the latter's table,
    which is never built, crashed this benchmark with ``'NoneType' object has no attribute 'n_windows'``.)"""
    if precomputed:
        return costs["mul"]
    if randomness == "short-exponent":
        window = best_table_window(run["encryptions"], SHORT_EXPONENT_BITS)
        if window is None:
            return costs["enc"] + costs["mul"]
        return (math.ceil(SHORT_EXPONENT_BITS / window) + 1) * costs["mul"]
    return costs["enc"]


def floor_seconds(run: dict[str, float], costs: dict[str, float], enc_seconds: float) -> float:
    """Counted big-number operations x measured per-operation cost (single core, per-key setup excluded)."""
    return (run["encryptions"] * enc_seconds + run["resp_multiexp_mults"] * costs["mul"]
            + run["resp_response_ciphertexts"] * (costs["rerand"] + costs["mul"])
            + run["decryptions"] * costs["dec"])


# ----------------------------------------------------------------------------- CPU against the floor (issue 25)
def cpu_seconds() -> float:
    """User + system CPU of this process and its finished children (``resource.getrusage``)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _cpu_per_call(fn, calls: int, batches: int = 5) -> float:
    """CPU seconds per call: minimum over ``batches`` batches."""
    best = float("inf")
    for _ in range(batches):
        t0 = cpu_seconds()
        for i in range(calls):
            fn(i)
        best = min(best, (cpu_seconds() - t0) / calls)
    return best


def _validate_per_ciphertext(pk: paillier.PaillierPublicKey, frame: bytes, count: int) -> list[int]:
    """The validation before issue 25: parse, range check and one gcd per ciphertext."""
    width = ciphertext_byte_length(pk)
    return [validate_ciphertext(pk, int.from_bytes(frame[i * width:(i + 1) * width], "big")) for i in range(count)]


def unit_costs(pk: paillier.PaillierPublicKey, sk: paillier.PaillierPrivateKey) -> dict[str, float]:
    """CPU µs per unit operation, measured in tight loops on full-size operands in this run."""
    rng = np.random.default_rng(0)
    n2, p2 = mpz(pk.nsquare), mpz(sk.p) ** 2
    xs = [mpz(int(pk.encrypt(int(rng.integers(1, 2**62))).ciphertext())) for _ in range(64)]
    ys = [x % p2 for x in xs]
    frame_cts = [int(xs[i & 63]) for i in range(2048)]
    frame = ciphertexts_to_bytes(pk, frame_cts)
    resp = Encrypter(pk.n, randomness=RERANDOMISATION)
    us = {
        "mulmod_n2": _cpu_per_call(lambda i: xs[i & 63] * xs[(i + 1) & 63] % n2, 20000),
        "mulmod_p2": _cpu_per_call(lambda i: ys[i & 63] * ys[(i + 1) & 63] % p2, 20000),
        **c_mulmod_costs(xs[0], xs[1], n2, ys[0], ys[1], p2),
        **ifma_mulmod_costs(n2, p2),
        "serialise": _cpu_per_call(lambda i: ciphertexts_to_bytes(pk, frame_cts), 3) / len(frame_cts),
        "validate_per_ciphertext_gcd": _cpu_per_call(lambda i: _validate_per_ciphertext(pk, frame, 2048), 3) / 2048,
        "validate_batched": _cpu_per_call(lambda i: ciphertexts_from_bytes(pk, frame, 2048), 3) / 2048,
        "rerandomise": _cpu_per_call(lambda i: resp.rerandomise(xs[i & 63]), 5),
        "decrypt": _cpu_per_call(lambda i: sk.raw_decrypt(int(xs[i & 63])), 10),
    }
    holder = Encrypter(pk.n, p=sk.p, q=sk.q, randomness="short-exponent")
    rows = rng.integers(0, 2**40, (2048, 1))
    draws = [holder.draw() for _ in range(2048)]
    width = ciphertext_byte_length(pk)
    for name, factors in (("encrypt_short_exponent_n2", False), ("encrypt_short_exponent_crt", True)):
        state = holder.task_state(with_factors=factors)   # before issue 25 the key holder's tasks had no factors
        encrypt_rows_task(state, rows, [(0, 1)], 60, draws, False, width)   # builds the task's table (cached)
        us[name] = _cpu_per_call(lambda i, st=state: encrypt_rows_task(st, rows, [(0, 1)], 60, draws, False, width),
                                 1, 3) / 2048
    return {k: v * 1e6 for k, v in us.items()}


def c_mulmod_costs(x: Any, y: Any, n2: Any, xp: Any, yp: Any, p2: Any) -> dict[str, float]:
    """Seconds per multiplication at C speed (vfl's C loops built): GMP's mul + mod and the Montgomery product."""
    if native.fastloops is None:
        return {}
    calls = 2000
    out = {}
    for name, (a, b, m) in (("n2", (x, y, n2)), ("p2", (xp, yp, p2))):
        out[f"mulmod_{name}_gmp_c"] = _cpu_per_call(lambda i, a=a, b=b, m=m: native.mulmod_repeat(a, b, m, calls),
                                                    1, 5) / calls
        out[f"montmul_{name}_c"] = _cpu_per_call(lambda i, a=a, b=b, m=m: native.mulmod_repeat(a, b, m, calls, True),
                                                 1, 5) / calls
    return out


def ifma_mulmod_costs(n2: Any, p2: Any, rows: int = 1000) -> dict[str, float]:
    """Seconds per product of the C buckets' eight-lane AVX-512 IFMA Montgomery multiplication (issue 34), modulo
    ``n2`` and ``p2``, where the CPU has it: ``rows`` bases into one bucket of each of 8 products (exponent 1), so every
    base after the first is one product and every batch fills its eight lanes; digit conversion included."""
    if not native.ifma_buckets():
        return {}
    out = {}
    exps = np.ones((rows, 8), dtype=np.uint64)
    for name, m in (("n2", int(n2)), ("p2", int(p2))):
        width = (m.bit_length() + 7) // 8
        frame = b"".join((secrets.randbelow(m - 2) + 2).to_bytes(width, "big") for _ in range(rows))

        def run(i: int, m: int = m, width: int = width, frame: bytes = frame) -> None:
            native.CBucketAccumulator(8, 1, 1, m, simd=True).add_frame(frame, width, 1, exps)

        out[f"montmul_{name}_ifma_c"] = _cpu_per_call(run, 1, 5) / (8 * (rows - 1))
    return out


def cheapest_mulmod(u: dict[str, float], modulus: str) -> float:
    """The cheapest measured multiplication modulo ``n2`` or ``p2``: Python/gmpy2, GMP in C, Montgomery in C, and
    eight at a time on AVX-512 IFMA where measured (issue 34: vfl's buckets and the key holder's fixed-base tables
    run their multiplications that way where the CPU has it)."""
    return min(v for k, v in u.items() if k in (f"mulmod_{modulus}", f"mulmod_{modulus}_gmp_c", f"montmul_{modulus}_c",
                                                 f"montmul_{modulus}_ifma_c"))


def floor_us(n: int, groups: int, d_resp: int, exponent_bits: int, u: dict[str, float],
             multiexp_mults: float | None = None) -> dict[str, float]:
    """The Paillier floor of one product (µs) from unit costs: what the protocol needs with every known technique.

    Multiplications are priced at the cheapest measured implementation (:func:`cheapest_mulmod`).
    Key holder: per ciphertext a CRT short-exponent ``rho`` (two fixed-base tables modulo p^2 and q^2 with the window
    ``best_table_window`` picks for ``n G`` encryptions) and two mulmods modulo n^2 (CRT recombination, ``(1 + mn)
    rho``); serialisation and batched validation. Responder: Pippenger buckets kept over all ``n`` rows
    (``multiexp_cost(n, b)`` mulmods per column and group), a re-randomiser and a ``g^M`` mulmod per response
    ciphertext. Key holder: one CRT decryption per response ciphertext. ``multiexp_mults`` (issue 34): the
    multi-exponentiations' multiplications counted exactly for the best known method on the run's exponents
    (:func:`best_multiexp_counts`); without it the bucket bound ``multiexp_cost`` per column and group.
    """
    cts, resp = n * groups, d_resp * groups
    mul_n2, mul_p2 = cheapest_mulmod(u, "n2"), cheapest_mulmod(u, "p2")
    window = best_table_window(cts, SHORT_EXPONENT_BITS) or 8
    enc = cts * (2 * math.ceil(SHORT_EXPONENT_BITS / window) * mul_p2 + 2 * mul_n2)
    io = cts * (u["serialise"] + u["validate_batched"]) + resp * 2 * u["serialise"]
    mexp = (resp * multiexp_cost(n, exponent_bits) if multiexp_mults is None else multiexp_mults) * mul_n2
    tail = resp * (u["rerandomise"] + mul_n2 + u["decrypt"])
    return {"encrypt": enc, "io": io, "multiexp": mexp, "respond_tail": tail, "total": enc + io + mexp + tail}


def vfl_cpu_run(A: np.ndarray, B: np.ndarray, keypair: tuple, guard_bits: int = DEFAULT_GUARD_BITS,
                responder_executor: Any = None) -> dict:
    """One streamed product as two parties run it (stream header, chunks through their wire form and the
    responder's validation, response, decryption), one worker each: CPU seconds and exactness against numpy."""
    pk, sk = keypair
    t0 = cpu_seconds()
    holder = ProductEncryptor(sk, A, response_cols=B.shape[1], precision_bits=P, workers=1, guard_bits=guard_bits)
    responder = ProductResponder(B, precision_bits=P, workers=1, executor=responder_executor)
    stream = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
    fold = responder.open(stream)
    for chunk in holder.encrypted_chunks():
        fold.add(EncryptedChunk.from_wire(*chunk.to_wire(), stream))
    response, share_b = fold.finish()
    header, frames = response.to_wire()
    share_a = holder.decrypt(MaskedResponse.from_wire(header, frames, pk))
    cpu = cpu_seconds() - t0
    total = combine_packed_shares(share_a, share_b, layout=holder.layout, n_cols=holder.n_cols, modulus=int(pk.n))
    exact = total.tolist() == to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0)).tolist()
    return {"cpu_s": cpu, "exact": bool(exact), "groups": holder.n_groups, "layout": holder.layout,
            "mults": responder.stats["multiexp_mults"]}


_C_LOOPS = native.fastloops
_TASK_CACHES: dict[str, dict] = {"c": {}, "python": {}}


@contextmanager
def inner_loops(kind: str) -> Iterator[None]:
    """Run vfl with the C inner loops (``"c"``, when built) or the pure-Python fallback (``"python"``, what
    ``VFL_PURE_PYTHON=1`` selects), each with its own cache of per-key encryption tables (built in a warm-up)."""
    saved, saved_cache = native.fastloops, executors._TASK_ENCRYPTERS
    native.fastloops = _C_LOOPS if kind == "c" else None
    executors._TASK_ENCRYPTERS = _TASK_CACHES[kind]
    try:
        yield
    finally:
        native.fastloops, executors._TASK_ENCRYPTERS = saved, saved_cache


def shape_runs(A: np.ndarray, B: np.ndarray, keypair: tuple, repeats: int, kinds: list[str]) -> dict[str, list]:
    """``repeats`` runs per implementation, alternating C and Python so both see the same machine load."""
    runs: dict[str, list] = {k: [] for k in kinds}
    for _ in range(repeats):
        for kind in kinds:
            with inner_loops(kind):
                runs[kind].append(vfl_cpu_run(A, B, keypair))
    return runs


def floor_report(keypair: tuple, shapes: list[tuple[str, int, int, int]], repeats: int) -> dict:
    """Unit costs, then per shape vfl's median CPU µs per row against the floor (and with the Python inner loops);
    the technique comparisons."""
    pk, sk = keypair
    rng = np.random.default_rng(2025)
    kinds = ["c", "python"] if _C_LOOPS is not None else ["python"]
    for kind in kinds:   # per-key setup, cached per process (and per implementation)
        with inner_loops(kind):
            vfl_cpu_run(*(rng.uniform(-1, 1, (517, k)) for k in (13, 14)), keypair)
    u = unit_costs(pk, sk)
    out: dict = {"units_us": {k: round(v, 3) for k, v in u.items()}, "shapes": [], "guard": [],
                 "inner_loops": native.IMPLEMENTATION}
    for name, n, d_a, d_b in shapes:
        A, B = rng.uniform(-1, 1, (n, d_a)), rng.uniform(-1, 1, (n, d_b))
        both = shape_runs(A, B, keypair, repeats, kinds)
        runs = both[kinds[0]]
        lay = runs[0]["layout"]
        counts = best_multiexp_counts(B, n, d_b, runs[0]["groups"], lay.exponent_bits, ciphertext_byte_length(pk))
        fl = floor_us(n, runs[0]["groups"], d_b, lay.exponent_bits, u,
                      multiexp_mults=counts["best"] * n * d_b * runs[0]["groups"])
        cpu = statistics.median(r["cpu_s"] for r in runs)
        py_cpu = statistics.median(r["cpu_s"] for r in both["python"])
        out["shapes"].append({"shape": name, "n": n, "d_enc": d_a, "d_resp": d_b, "groups": runs[0]["groups"],
                              "cpu_s": [round(r["cpu_s"], 3) for r in runs],
                              "python_cpu_s": [round(r["cpu_s"], 3) for r in both["python"]],
                              "vfl_us_per_row": round(cpu * 1e6 / n, 1),
                              "python_us_per_row": round(py_cpu * 1e6 / n, 1),
                              "c_speedup": round(py_cpu / cpu, 2),
                              "floor_us_per_row": round(fl["total"] / n, 1),
                              "floor_parts_us_per_row": {k: round(v / n, 1) for k, v in fl.items()},
                              "ratio": round(cpu * 1e6 / fl["total"], 2),
                              "exact": all(r["exact"] for kind in kinds for r in both[kind]),
                              "multiexp_per_row_col": counts})
    A, B = rng.uniform(-1, 1, (517, 20)), rng.uniform(-1, 1, (517, 10))
    for guard in (40, DEFAULT_GUARD_BITS):   # the former kappa = 40 slack against the guard band, same invocation
        runs = [vfl_cpu_run(A, B, keypair, guard_bits=guard) for _ in range(repeats)]
        lay = runs[0]["layout"]
        out["guard"].append({"guard_bits": guard, "slot_bits": lay.slot_bits, "slots": lay.slots_per_ciphertext,
                             "shape": "517 x 20 by 517 x 10", "groups": runs[0]["groups"],
                             "vfl_us_per_row": round(statistics.median(r["cpu_s"] for r in runs) * 1e6 / 517, 1),
                             "exact": all(r["exact"] for r in runs)})
    out["buckets"] = bucket_comparison(keypair, repeats)
    out["multiexp_sorted"] = sorted_multiexp_comparison(keypair, repeats)
    return out


def best_multiexp_counts(B: np.ndarray, n: int, d_b: int, groups: int, exponent_bits: int,
                         width: int) -> dict[str, float]:
    """Multiplications per row and responder column of each multi-exponentiation method, counted exactly on the
    responder's encoded exponents (``vfl.secure.multiexp_counts``): the bucket bound the floor used before issue 34,
    vfl's buckets kept across chunks (its window), the best window, the sorted-exponent method, the best per column
    (what the floor now prices) and Pippenger's asymptotic ``H / lg H``."""
    E = np.asarray(encode_offset(B, P, 1.0)[0], dtype=np.int64)
    window = persistent_bucket_window(n, exponent_bits, d_b * groups, width)
    return {k: round(v, 4) for k, v in multi_output_counts(E, window).items()}


def sorted_multiexp_comparison(keypair: tuple, repeats: int, n: int = 10_000, columns: int = 2) -> dict:
    """The sorted-exponent multi-exponentiation against the bucket method, both in the Python loops, on ``n``
    random units modulo n^2 (a ciphertext is one; the cost does not depend on which) and the exponents of
    ``columns`` encoded columns: CPU seconds (alternating, median of ``repeats``), multiplications, and whether the
    products are identical."""
    pk, _ = keypair
    rng = np.random.default_rng(34)
    n2 = mpz(pk.nsquare)
    bases = [mpz(secrets.randbelow(int(n2) - 2) + 2) for _ in range(n)]   # units modulo n^2, as ciphertexts are
    E = np.asarray(encode_offset(rng.uniform(-1, 1, (n, columns)), P, 1.0)[0], dtype=np.int64)
    exps = [[int(x) for x in E[:, k]] for k in range(columns)]
    bits = int(E.max()).bit_length()
    window = best_bucket_window(n, bits)
    runs: dict[str, list[float]] = {"buckets": [], "sorted": []}
    values: dict[str, list] = {}
    for _ in range(repeats):
        for name in runs:
            t0 = cpu_seconds()
            if name == "buckets":
                res = [_multiexp_python(bases, e, n2, window, bits) for e in exps]
            else:
                res = [multiexp_sorted(bases, e, n2) for e in exps]
            runs[name].append(cpu_seconds() - t0)
            values[name] = res
    per = n * columns
    return {"shape": f"{n} x {columns}", "exact": [v for v, _ in values["buckets"]] == [v for v, _ in values["sorted"]],
            **{f"{k}_us_per_row_col": round(statistics.median(v) * 1e6 / per, 2) for k, v in runs.items()},
            **{f"{k}_mults_per_row_col": round(sum(m for _, m in values[k]) / per, 4) for k in runs}}


def bucket_comparison(keypair: tuple, repeats: int) -> dict:
    """10^4 x 10 x 10 with the responder's multi-exponentiations per chunk (a one-thread executor: the path of
    process pools and Dask) against buckets kept across chunks (one local worker), same invocation."""
    rng = np.random.default_rng(26)
    A, B = rng.uniform(-1, 1, (10_000, 10)), rng.uniform(-1, 1, (10_000, 10))
    out: dict = {"shape": "10^4 x 10 x 10"}
    with ThreadPoolExecutor(1) as pool:
        for name, ex in (("per_chunk", pool), ("kept", None)):
            runs = [vfl_cpu_run(A, B, keypair, responder_executor=ex) for _ in range(repeats)]
            out[f"{name}_us_per_row"] = round(statistics.median(r["cpu_s"] for r in runs) * 1e6 / 10_000, 1)
            out[f"{name}_mults"] = runs[0]["mults"]
            out["exact"] = out.get("exact", True) and all(r["exact"] for r in runs)
    return out


def print_floor_report(rep: dict) -> None:
    u = rep["units_us"]
    print("# unit costs, CPU µs: " + ", ".join(f"{k} {v:.2f}" for k, v in u.items()))
    print(f"# validation per ciphertext: one gcd each {u['validate_per_ciphertext_gcd']:.2f} µs -> batched "
          f"{u['validate_batched']:.2f} µs ({u['validate_per_ciphertext_gcd'] / u['validate_batched']:.1f}x)")
    print(f"# key holder's short-exponent encryption per ciphertext (table, 2048 rows): modulo n^2 "
          f"{u['encrypt_short_exponent_n2']:.2f} µs -> CRT {u['encrypt_short_exponent_crt']:.2f} µs "
          f"({u['encrypt_short_exponent_n2'] / u['encrypt_short_exponent_crt']:.2f}x)")
    print(f"# inner loops: {rep['inner_loops']}; multiplication mod n^2 priced at {cheapest_mulmod(u, 'n2'):.2f} µs, "
          f"mod p^2 at {cheapest_mulmod(u, 'p2'):.2f} µs (the cheapest measured)")
    print(f"{'shape':>24} {'groups':>6} {'vfl µs/row':>11} {'python µs/row':>14} {'py/C':>5} {'floor µs/row':>13} "
          f"{'ratio':>6}  exact  cpu s (runs)")
    for r in rep["shapes"]:
        print(f"{r['shape']:>24} {r['groups']:6d} {r['vfl_us_per_row']:11.1f} {r['python_us_per_row']:14.1f} "
              f"{r['c_speedup']:5.2f} {r['floor_us_per_row']:13.1f} {r['ratio']:6.2f}  {str(r['exact']):5}  "
              f"{r['cpu_s']} / python {r['python_cpu_s']}   floor parts {r['floor_parts_us_per_row']}")
    b = rep["buckets"]
    print(f"# {b['shape']}: responder multi-exponentiation per chunk {b['per_chunk_us_per_row']:.1f} µs/row "
          f"({b['per_chunk_mults']} mulmods) -> buckets kept across chunks {b['kept_us_per_row']:.1f} µs/row "
          f"({b['kept_mults']} mulmods), exact {b['exact']}")
    for g in rep["guard"]:
        print(f"# guard {g['guard_bits']:2d} bits: w = {g['slot_bits']}, {g['slots']} slots, {g['shape']}: "
              f"{g['groups']} ciphertexts per row, vfl {g['vfl_us_per_row']:.1f} µs/row, exact {g['exact']}")


FLOOR_UNIT_LABELS = {"mulmod_n2": "multiplication mod n², Python (gmpy2)",
                     "mulmod_n2_gmp_c": "multiplication mod n², GMP mul + mod in C",
                     "montmul_n2_c": "multiplication mod n², Montgomery in C (vfl's buckets without IFMA)",
                     "montmul_n2_ifma_c": "multiplication mod n², 8 lanes of AVX-512 IFMA in C (vfl's buckets)",
                     "mulmod_p2": "multiplication mod p², Python (gmpy2)",
                     "mulmod_p2_gmp_c": "multiplication mod p², GMP mul + mod in C",
                     "montmul_p2_c": "multiplication mod p², Montgomery in C (vfl's tables without IFMA)",
                     "montmul_p2_ifma_c": "multiplication mod p², 8 lanes of AVX-512 IFMA in C (vfl's tables)",
                     "serialise": "serialise one ciphertext", "validate_batched": "parse + validate one ciphertext",
                     "rerandomise": "responder re-randomiser r^n mod n²", "decrypt": "CRT decryption"}


def markdown_floor(rep: dict) -> str:
    """The three tables of docs/secure_products.md's floor section, from the JSON (tests/docs/test_docs_numbers.py)."""
    u = rep["units_us"]
    lines = ["| unit operation | CPU µs |", "|---|---:|"]
    lines += [f"| {label} | {u[key]:.2f} |" for key, label in FLOOR_UNIT_LABELS.items() if key in u]
    lines += ["", "| shape | ciphertexts per row | vfl µs/row | Python loops µs/row | Python / vfl | floor µs/row | "
              "vfl / floor | floor: encrypt / I/O / multi-exp. / response, µs/row | exact |",
              "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rep["shapes"]:
        f = r["floor_parts_us_per_row"]
        parts = f"{f['encrypt']:.1f} / {f['io']:.1f} / {f['multiexp']:.1f} / {f['respond_tail']:.1f}"
        lines.append(f"| {r['shape']} | {r['groups']} | {r['vfl_us_per_row']:.1f} | {r['python_us_per_row']:.1f} | "
                     f"{r['c_speedup']:.2f} | {r['floor_us_per_row']:.1f} | {r['ratio']:.2f} | {parts} | "
                     f"{'yes' if r['exact'] else 'NO'} |")
    g40, g8 = rep["guard"]
    lines += ["", "| technique (same invocation) | before | after | before / after |", "|---|---:|---:|---:|",
              f"| ciphertext validation, µs per ciphertext (gcd each -> batched) | "
              f"{u['validate_per_ciphertext_gcd']:.2f} | {u['validate_batched']:.2f} | "
              f"{u['validate_per_ciphertext_gcd'] / u['validate_batched']:.2f} |",
              f"| short-exponent encryption, µs per ciphertext (mod n² -> CRT) | {u['encrypt_short_exponent_n2']:.2f} "
              f"| {u['encrypt_short_exponent_crt']:.2f} | "
              f"{u['encrypt_short_exponent_n2'] / u['encrypt_short_exponent_crt']:.2f} |",
              f"| {g8['shape']}, vfl µs/row (guard {g40['guard_bits']} -> {g8['guard_bits']} bits: "
              f"{g40['slots']} -> {g8['slots']} slots) | {g40['vfl_us_per_row']:.1f} | {g8['vfl_us_per_row']:.1f} | "
              f"{g40['vfl_us_per_row'] / g8['vfl_us_per_row']:.2f} |"]
    b = rep["buckets"]
    lines.append(f"| {b['shape']}, vfl µs/row (multi-exp. per chunk -> buckets kept across chunks) | "
                 f"{b['per_chunk_us_per_row']:.1f} | {b['kept_us_per_row']:.1f} | "
                 f"{b['per_chunk_us_per_row'] / b['kept_us_per_row']:.2f} |")
    return "\n".join(lines)


MULTIEXP_METHODS = {"kept_buckets": "vfl's buckets kept across chunks", "best_window": "buckets, best window",
                    "sorted": "sorted exponents (running products + gap buckets)", "best": "best of these (the floor)",
                    "bound_model": "bucket bound ceil(b/c)(n + 2^(c+1)) (floor before issue 34)",
                    "pippenger_asymptotic": "Pippenger's H / lg H without lower-order terms"}


def markdown_multiexp(rep: dict) -> str:
    """The two tables of docs/secure_products.md's multi-output section, from the floor JSON (issue 34)."""
    shapes = rep["shapes"]
    lines = ["| multiplications per row and column | " + " | ".join(r["shape"] for r in shapes) + " |",
             "|---|" + "---:|" * len(shapes)]
    lines += [f"| {label} | " + " | ".join(f"{r['multiexp_per_row_col'][key]:.2f}" for r in shapes) + " |"
              for key, label in MULTIEXP_METHODS.items()]
    m = rep["multiexp_sorted"]
    lines += ["", "| Python loops, one product per column | buckets | sorted exponents | buckets / sorted |",
              "|---|---:|---:|---:|",
              *(f"| {m['shape']}: {label} per row and column | {m[f'buckets_{key}_per_row_col']:.2f} | "
                f"{m[f'sorted_{key}_per_row_col']:.2f} | "
                f"{m[f'buckets_{key}_per_row_col'] / m[f'sorted_{key}_per_row_col']:.2f} |"
                for key, label in (("mults", "multiplications"), ("us", "CPU µs")))]
    return "\n".join(lines)


def floor_main(args: argparse.Namespace) -> int:
    keypair = generate_keypair(args.key_bits, allow_insecure=args.key_bits < 2048)
    shapes = [("forest 517 x 13 x 14", 517, 13, 14), ("10^4 x 10 x 10", 10_000, 10, 10)]
    if args.large:
        shapes.append(("10^5 x 10 x 10", 100_000, 10, 10))
    load = os.getloadavg()[0]
    rep = floor_report(keypair, shapes, args.repeats)
    rep.update(date=time.strftime("%Y-%m-%d"), load_before=round(load, 2), load_after=round(os.getloadavg()[0], 2),
               cores=os.cpu_count(), key_bits=args.key_bits, precision_bits=P, repeats=args.repeats,
               command="python benchmarks/secure_products.py --floor" + (" --large" if args.large else "")
               + f" --repeats {args.repeats}" + (f" --out {args.out}" if args.out else ""))
    print(f"# {rep['date']}, {args.key_bits}-bit keys, p = {P}, cores {rep['cores']}, load {load:.2f}; "
          f"CPU = getrusage(self + children), median of {args.repeats}")
    print_floor_report(rep)
    print(markdown_floor(rep))
    print(markdown_multiexp(rep))
    if args.out:
        Path(args.out).write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r["exact"] for r in rep["shapes"] + rep["guard"] + [rep["buckets"], rep["multiexp_sorted"]]) else 1


def against_main(args: argparse.Namespace) -> int:
    """Issue 34: this tree's product against revision ``args.against``'s, interleaved child processes
    (benchmarks/secure_products_baseline.py)."""
    import secure_products_baseline as baseline

    shapes = ["forest 517 x 13 x 14", "10^4 x 10 x 10"] + (["10^5 x 10 x 10"] if args.large else [])
    load = os.getloadavg()[0]
    rep = baseline.compare(args.against, shapes, args.repeats, args.key_bits)
    rep.update(date=time.strftime("%Y-%m-%d"), load_before=round(load, 2), load_after=round(os.getloadavg()[0], 2),
               cores=os.cpu_count(), key_bits=args.key_bits, precision_bits=P, repeats=args.repeats,
               command=f"python benchmarks/secure_products.py --against {args.against}"
               + (" --large" if args.large else "") + f" --repeats {args.repeats}"
               + (f" --out {args.out}" if args.out else ""))
    print(f"# {rep['date']}, against {rep['baseline_commit'][:7]}, load {load:.2f} -> {rep['load_after']:.2f}, "
          f"CPU = getrusage(self + children), median of {args.repeats} children per tree")
    print(baseline.markdown_speedup(rep))
    if args.out:
        Path(args.out).write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r["exact"] for r in rep["shapes"]) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="time naive on a row subsample and extrapolate")
    ap.add_argument("--naive-rows", type=int, default=40, help="rows of the naive subsample in --quick mode")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--floor", action="store_true",
                    help="CPU µs per row against the Paillier floor from unit costs measured in this run (issue 25)")
    ap.add_argument("--large", action="store_true", help="with --floor: add 10^5 x 10 x 10")
    ap.add_argument("--repeats", type=int, default=3, help="with --floor: runs per shape (median)")
    ap.add_argument("--out", help="with --floor: write the report as JSON here")
    ap.add_argument("--markdown", help="print the docs tables of a --floor JSON file and exit")
    ap.add_argument("--against", metavar="REV",
                    help="issue 34: CPU of this tree's product against git revision REV's, interleaved child processes "
                         "(forest and 10^4 x 10 x 10; --large adds 10^5; --repeats children per tree and shape)")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown_floor(json.loads(Path(args.markdown).read_text(encoding="utf-8"))))
        return 0
    if args.floor:
        return floor_main(args)
    if args.against:
        return against_main(args)

    keypair = generate_keypair(args.key_bits, allow_insecure=args.key_bits < 2048)
    pk, sk = keypair
    rng = np.random.default_rng(2024)
    print(f"# {args.key_bits}-bit keys, precision_bits={P}, cores={os.cpu_count()}, "
          f"load={os.getloadavg()[0]:.2f}")
    costs = {m: per_op_costs(pk, sk, m) for m in ("short-exponent", "standard")}
    warm = rng.uniform(-1, 1, (517, 13)), rng.uniform(-1, 1, (517, 14))
    for m in costs:  # per-key setup (h_s, fixed-base table), cached per process as in a real party
        t0 = time.perf_counter()
        ours(*warm, keypair, randomness=m, workers=1, repeats=1)
        print(f"# per-key setup + first forest run [{m}]: {time.perf_counter() - t0:.2f} s")
    for m, c in costs.items():
        enc = "CRT encryption" if m == "standard" else "256-bit powmod (short-exponent rho without table)"
        print(f"# per-op [{m}]: mulmod n^2 {c['mul'] * 1e6:.1f} us, {enc} {c['enc'] * 1e3:.3f} ms, "
              f"responder re-randomisation {c['rerand'] * 1e3:.2f} ms, CRT decryption {c['dec'] * 1e3:.2f} ms")

    shapes = [("forest", 517, 13, 14), ("n=2000", 2000, 10, 10), ("n=10000", 10_000, 10, 10)]
    if args.quick:
        shapes = shapes[:2]
    modes = [("short-exponent", 1, False), ("short-exponent", 2, False), ("standard", 1, False),
             ("standard", 2, False), ("standard", 1, True)]
    if args.quick:
        modes = [modes[0], modes[2]]
    print(f"{'shape':>8} {'protocol':>34} {'time s':>9} {'x naive':>8} {'floor s':>8} {'/floor':>7} {'us/row':>7}")
    for name, n, d_a, d_b in shapes:
        A, B = rng.uniform(-1, 1, (n, d_a)), rng.uniform(-1, 1, (n, d_b))
        full_naive = name == "forest" and not args.quick
        rows = n if full_naive else min(n, args.naive_rows)
        ref, t_naive = naive_protocol(A[:rows], B[:rows], pk, sk)
        assert np.allclose(ref, A[:rows].T @ B[:rows], atol=1e-6)
        t_naive *= n / rows
        label = "naive phe per entry" + ("" if full_naive else f" (extrap. {rows} rows)")
        print(f"{name:>8} {label:>34} {t_naive:9.2f} {1.0:8.1f} {'':>8} {'':>7} {t_naive / n * 1e6:7.0f}")
        for randomness, workers, pre in modes:
            r = ours(A, B, keypair, randomness=randomness, workers=workers, precompute=pre)
            fl = floor_seconds(r, costs[randomness], holder_encryption_seconds(r, randomness, costs[randomness], pre))
            tag = f"packed {randomness} w={workers}" + (" +precomp" if pre else "")
            print(f"{name:>8} {tag:>34} {r['time']:9.3f} {t_naive / r['time']:8.1f} {fl:8.3f} "
                  f"{r['time'] / fl:7.2f} {r['time'] / n * 1e6:7.0f}"
                  + (f"   (offline {r['offline']:.2f} s)" if pre else "")
                  + ("" if r["exact"] and r["err"] <= inner_product_error_bound(n, P, 1.0)
                     else f"  NOT EXACT (max error {r['err']:.2e})"))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
