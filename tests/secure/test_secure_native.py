"""The optional C inner loops (vfl.secure._fastloops, issue 25) against the Python loops and plain pow/mod.

Every primitive runs in both implementations on the same inputs (``impl`` = "python" / "c"; "c" is skipped only
where the extension is not built, and :func:`test_the_c_extension_is_built_where_a_compiler_and_gmp_exist` fails
if it should have been). Keys are 1024-bit INSECURE test keys.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vfl.secure import executors, fastmath, generate_keypair, native
from vfl.secure.encoding import to_fixed_point_ints
from vfl.secure.fastmath import BucketAccumulator, FixedBaseTable
from vfl.secure.keys import ciphertext_byte_length
from vfl.secure.products import ProductEncryptor, ProductResponder, ProductStreamHeader, combine_packed_shares

BUILT = native.fastloops is not None
needs_c = pytest.mark.skipif(not BUILT, reason=f"C loops not active: {native.IMPLEMENTATION}")
IMPLEMENTATIONS = ["python", pytest.param("c", marks=needs_c)]
# odd moduli of 1, 8, 32 (word-by-word REDC) and 64 limbs (GMP's mpn_redc_n when trusted), and a Mersenne prime
ODD_MODULI = [(1 << 61) - 1, (1 << 511) + 187, (1 << 2047) + 1113, (1 << 4095) + 7017]
MODULUS_IDS = ["61-bit", "512-bit", "2048-bit", "4096-bit"]


@pytest.fixture
def impl(request, monkeypatch):
    """``request.param`` loops everywhere in this test: per-key encrypters and task tables are rebuilt."""
    if request.param == "python":
        monkeypatch.setattr(native, "fastloops", None)
    monkeypatch.setattr(executors, "_TASK_ENCRYPTERS", {})
    monkeypatch.setattr(fastmath, "_ENCRYPTER_CACHE", {})
    return request.param


def make_table(impl: str, base, modulus, bits: int, window: int):
    return (native.CFixedBaseTable if impl == "c" else FixedBaseTable)(base, modulus, bits, window)


def make_buckets(impl: str, n_products: int, bits: int, window: int, modulus):
    return (native.CBucketAccumulator if impl == "c" else BucketAccumulator)(n_products, bits, window, modulus)


def product_of_powers(bases, exponents, modulus) -> int:
    out = 1
    for b, e in zip(bases, exponents, strict=True):
        out = out * pow(int(b), int(e), int(modulus)) % int(modulus)
    return out


# ----------------------------------------------------------------------------- fixed-base tables
@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
@pytest.mark.parametrize("modulus", ODD_MODULI + [1 << 521, 2 * ((1 << 255) + 95)],   # odd, power of 2, even
                         ids=MODULUS_IDS + ["2^521", "even-257-bit"])
@pytest.mark.parametrize("window", [1, 4, 8])
def test_fixed_base_table_equals_pow(impl, modulus, window):
    rnd = random.Random(f"{modulus}-{window}")
    base = rnd.randrange(2, modulus)
    table = make_table(impl, base, modulus, 256, window)
    bits = window * table.n_windows
    for e in [0, 1, 2, (1 << bits) - 1, 1 << (bits - 1)] + [rnd.getrandbits(256) for _ in range(5)]:
        assert int(table.pow(e)) == pow(base, e, modulus)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_fixed_base_table_refuses_exponents_outside_its_range(impl):
    table = make_table(impl, 3, (1 << 127) - 1, 20, 5)
    with pytest.raises(ValueError, match="exponent"):
        table.pow(1 << 20)
    with pytest.raises(ValueError, match="exponent"):
        table.pow(-1)


@needs_c
def test_c_and_python_tables_agree_on_a_base_larger_than_the_modulus():
    m = (1 << 127) - 1
    for e in (0, 1, 5, 12345):
        assert int(native.CFixedBaseTable(m + 10, m, 16, 4).pow(e)) == int(FixedBaseTable(m + 10, m, 16, 4).pow(e))


@needs_c
@pytest.mark.parametrize("modulus", [0, 1])
def test_c_table_refuses_a_modulus_below_two(modulus):
    with pytest.raises(ValueError, match="modulus"):
        native.CFixedBaseTable(3, modulus, 16, 4)


# ----------------------------------------------------------------------------- buckets
@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
@pytest.mark.parametrize("modulus", ODD_MODULI, ids=MODULUS_IDS)
@pytest.mark.parametrize(("bits", "window"), [(26, 13), (26, 1), (16, 16), (64, 11), (1, 3)])
def test_buckets_over_several_frames_equal_the_product_of_powers(impl, modulus, bits, window):
    """Rows x groups ciphertexts in three frames, exponents from 0 to 2^bits - 1 (rows x columns): every product
    ``k G + g`` equals prod_i c_ig^{e_ik} mod N; the Python and C loops count the same multiplications."""
    if window == 16 and modulus.bit_length() > 600:
        pytest.skip("2^17 combination multiplications per product: the 61- and 512-bit moduli cover window 16")
    rnd = random.Random(f"{modulus}-{bits}-{window}")
    groups, cols, rows = 2, 3, 40
    width = (modulus.bit_length() + 7) // 8
    bases = [[rnd.randrange(1, modulus) for _ in range(groups)] for _ in range(rows)]
    exps = np.array([[rnd.choice([0, 1, (1 << bits) - 1, rnd.getrandbits(bits)]) for _ in range(cols)]
                     for _ in range(rows)], dtype=np.uint64)
    acc = make_buckets(impl, cols * groups, bits, window, modulus)
    for lo, hi in [(0, 7), (7, 8), (8, rows)]:
        frame = b"".join(b.to_bytes(width, "big") for row in bases[lo:hi] for b in row)
        acc.add_frame(frame, width, groups, exps[lo:hi])
    got = [int(acc.result(k * groups + g)) for k in range(cols) for g in range(groups)]
    want = [product_of_powers([r[g] for r in bases], exps[:, k].tolist(), modulus)
            for k in range(cols) for g in range(groups)]
    assert got == want
    other = make_buckets("python", cols * groups, bits, window, modulus)
    frame = b"".join(b.to_bytes(width, "big") for row in bases for b in row)
    other.add_frame(frame, width, groups, exps)
    assert [int(other.result(t)) for t in range(cols * groups)] == want and other.mults == acc.mults


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_buckets_edge_cases(impl):
    """Untouched products and all-zero exponents give 1, an empty list adds nothing, a product is combined once,
    and negative or too wide exponents are refused."""
    m = ODD_MODULI[1]
    acc = make_buckets(impl, 3, 26, 13, m)
    acc.add(0, [], [])
    acc.add(1, [5, 7], [0, 0])
    acc.add(2, [5, 7], [3, 1 << 25])
    assert [int(acc.result(t)) for t in range(3)] == [1, 1, product_of_powers([5, 7], [3, 1 << 25], m)]
    with pytest.raises(ValueError, match="already combined"):
        acc.result(2)
    with pytest.raises(ValueError, match="already combined"):
        acc.add(2, [5], [1])
    fresh = make_buckets(impl, 1, 26, 13, m)
    for bad in (-1, 1 << 26):
        with pytest.raises(ValueError, match="exponent"):
            fresh.add(0, [5], [bad])


@needs_c
def test_c_buckets_check_what_the_network_could_get_wrong():
    """Lengths, counts and values are checked before the C loop touches memory: a frame that is not whole rows,
    an exponent block of the wrong size, a base that is not below the modulus, an even modulus."""
    m = ODD_MODULI[1]
    width = 64
    acc = native.CBucketAccumulator(2, 26, 13, m)
    good = (5).to_bytes(width, "big") * 4
    with pytest.raises(ValueError, match="whole rows"):
        acc.add_frame(good[:-1], width, 1, np.ones((4, 2), dtype=np.uint64))
    with pytest.raises(ValueError, match="whole rows"):
        acc.add_frame(good, width, 1, np.ones((3, 2), dtype=np.uint64))
    with pytest.raises(ValueError, match="not below the modulus"):
        acc.add_frame(good[:-width] + m.to_bytes(width, "big"), width, 1, np.ones((4, 2), dtype=np.uint64))
    with pytest.raises(ValueError, match="exponents must"):
        acc.add_frame(good, width, 1, -np.ones((4, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="bad width"):
        native.fastloops.Buckets(2, 13, 2, m.to_bytes(width, "big")).add(good, width, 1, b"\0" * 64, 2, 1)
    with pytest.raises(ValueError, match="odd modulus"):
        native.CBucketAccumulator(1, 26, 13, m + 1)
    acc.add_frame(good, width, 1, np.full((4, 2), 3, dtype=np.uint64))   # after the refusals: still consistent
    assert int(acc.result(0)) == int(acc.result(1)) == pow(5, 12, m)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
@pytest.mark.parametrize("modulus", ODD_MODULI[1:] + [(1 << 512) + 2], ids=MODULUS_IDS[1:] + ["even-513-bit"])
def test_per_chunk_multiexp_counts_and_values_agree(impl, modulus):
    """fastmath.multiexp (process-pool and Dask tasks) gives the same value and multiplication count with the C
    buckets as with the Python loop, for every window; the C path declines bases that are not below the modulus."""
    rnd = random.Random(f"multiexp-{modulus}")
    bases = [rnd.randrange(1, modulus) for _ in range(60)]
    exps = [rnd.getrandbits(rnd.choice([0, 1, 5, 26])) for _ in range(60)]
    want = product_of_powers(bases, exps, modulus)
    for window in (None, 1, 4, 9):
        value, mults = fastmath.multiexp(bases, exps, modulus, window)
        c = window or fastmath.best_bucket_window(60, max(e.bit_length() for e in exps))
        assert int(value) == want
        assert (value, mults) == fastmath._multiexp_python(bases, exps, modulus, c,
                                                           max(e.bit_length() for e in exps))
    assert native.c_multiexp([modulus + 1], [3], modulus, 2, 2) is None


def test_the_factories_choose_c_only_where_it_applies():
    m = ODD_MODULI[1]
    c_or_py = native.CBucketAccumulator if BUILT else BucketAccumulator
    assert type(fastmath.bucket_accumulator(1, 26, 13, m)) is c_or_py
    assert type(fastmath.bucket_accumulator(1, 26, 13, m + 1)) is BucketAccumulator    # even modulus
    assert type(fastmath.bucket_accumulator(1, 80, 10, m)) is BucketAccumulator        # exponents > 64 bits
    assert type(fastmath.fixed_base_table(3, m, 256, 5)) is (native.CFixedBaseTable if BUILT else FixedBaseTable)


@needs_c
@pytest.mark.parametrize("modulus", ODD_MODULI, ids=MODULUS_IDS)
def test_mulmod_repeat_is_the_plain_chain_of_multiplications(modulus):
    """The benchmark's unit costs: GMP's mul + mod, and the Montgomery product (a b^k R^-k) of the buckets."""
    a, b, r = modulus // 3, modulus // 7, 1 << (64 * ((modulus.bit_length() + 63) // 64))
    assert native.mulmod_repeat(a, b, modulus, 0) == a
    assert native.mulmod_repeat(a, b, modulus, 50) == a * pow(b, 50, modulus) % modulus
    assert native.mulmod_repeat(a, b, modulus, 50, montgomery=True) == a * pow(b * pow(r, -1, modulus), 50,
                                                                              modulus) % modulus
    with pytest.raises(ValueError, match="odd modulus"):
        native.mulmod_repeat(a, b, modulus + 1, 5, montgomery=True)


# ----------------------------------------------------------------------------- whole products, both loops
@pytest.fixture(scope="module")
def keypair():
    return generate_keypair(1024, allow_insecure=True)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_encryption_frames_are_identical_in_both_implementations(impl, keypair):
    """The key holder's encryption task with the same randomness gives the same bytes with either implementation
    (and with CRT tables or the table modulo n^2)."""
    pk, sk = keypair
    holder = fastmath.Encrypter(pk.n, p=sk.p, q=sk.q)
    rows = np.random.default_rng(5).integers(0, 2**20, (40, 3))
    draws = [random.Random(i).getrandbits(fastmath.SHORT_EXPONENT_BITS) for i in range(80)]
    width = ciphertext_byte_length(pk)
    frames = {factors: executors.encrypt_rows_task(holder.task_state(with_factors=factors), rows,
                                                  [(0, 2), (2, 3)], 30, draws, False, width)
              for factors in (True, False)}
    assert frames[True] == frames[False]
    assert frames[True] == _reference_frames(int(pk.n), int(holder.h_s), rows, draws, width)


def _reference_frames(n: int, h_s: int, rows, draws, width) -> bytes:
    """The same ciphertexts with plain pow: (1 + m n) h_s^alpha mod n^2."""
    from vfl.secure.packing import pack

    n2 = n * n
    out, t = b"", 0
    for row in rows.tolist():
        for lo, hi in [(0, 2), (2, 3)]:
            out += ((1 + pack(row[lo:hi], 30) * n) * pow(h_s, draws[t], n2) % n2).to_bytes(width, "big")
            t += 1
    return out


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_a_streamed_product_is_exact_with_either_implementation(impl, keypair):
    pk, sk = keypair
    rng = np.random.default_rng(26)
    A, B = rng.uniform(-1, 1, (300, 4)), rng.uniform(-1, 1, (300, 3))
    holder = ProductEncryptor(sk, A, response_cols=3, precision_bits=20, workers=1,
                              max_frame_bytes=40 * ciphertext_byte_length(pk))
    responder = ProductResponder(B, precision_bits=20, workers=1)
    header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
    fold = responder.open(header)
    assert (type(fold._buckets) is native.CBucketAccumulator) == (impl == "c")
    for chunk in holder.encrypted_chunks():
        fold.add(type(chunk).from_wire(*chunk.to_wire(), header))
    response, share_b = fold.finish()
    share_a = holder.decrypt(response)
    total = combine_packed_shares(share_a, share_b, layout=holder.layout, n_cols=holder.n_cols, modulus=int(pk.n))
    assert total.tolist() == to_fixed_point_ints(A, 20, 1.0).T.dot(to_fixed_point_ints(B, 20, 1.0)).tolist()


# ----------------------------------------------------------------------------- which implementation runs
def _run(code: str, **env: str) -> str:
    full = {**os.environ, **env}
    full["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), full.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                          env=full).stdout


def test_vfl_pure_python_forces_the_python_loops_with_the_same_numbers():
    code = ("import json; from vfl.secure import native, fastmath\n"
            "m = (1 << 511) + 187; acc = fastmath.bucket_accumulator(1, 26, 13, m)\n"
            "acc.add(0, [m // 3, m // 5, 7], [12345, 2**26 - 1, 0])\n"
            "print(json.dumps([native.IMPLEMENTATION, type(acc).__name__, int(acc.result(0)), acc.mults,"
            " int(fastmath.fixed_base_table(3, m, 256, 6).pow(2**255 + 1))]))")
    forced = json.loads(_run(code, VFL_PURE_PYTHON="1"))
    default = json.loads(_run(code, VFL_PURE_PYTHON="0"))
    assert json.loads(_run(code, VFL_PURE_PYTHON="false"))[0] == default[0]   # "false" does not force Python
    assert forced[0].startswith("pure Python") and forced[1] == "BucketAccumulator"
    assert default[1] == ("CBucketAccumulator" if default[0].startswith("C ") else "BucketAccumulator")
    m = (1 << 511) + 187
    assert forced[2:] == default[2:] and forced[2] == product_of_powers([m // 3, m // 5, 7], [12345, 2**26 - 1, 0], m)
    assert forced[4] == pow(3, 2**255 + 1, m)


def test_vfl_version_names_the_active_implementation():
    out = _run("from vfl.cli import main; main(['--version'])")
    assert "inner loops:" in out and native.IMPLEMENTATION.split(" (")[0] in out


def test_the_c_extension_is_built_where_a_compiler_and_gmp_exist():
    """CI installs with ``pip install -e '.[dev,plots]'`` where gcc and gmp.h exist: the C loops must be active
    there (unless VFL_PURE_PYTHON asks for Python), or the C half of this file would silently be skipped."""
    headers = [Path("/usr/include/gmp.h"), *Path("/usr/include").glob("*-linux-gnu/gmp.h")]
    if native.pure_python_requested():
        pytest.skip("VFL_PURE_PYTHON is set")
    if shutil.which("gcc") is None or not any(h.is_file() for h in headers):
        pytest.skip("no C compiler or GMP headers: the Python loops are the expected ones")
    assert BUILT, native.IMPLEMENTATION


_POOL_PRODUCT = (
    "import json, sys\n"
    "import numpy as np\n"
    "from vfl.secure import native\n"
    "from vfl.secure.keys import generate_keypair\n"
    "from vfl.secure.products import run_secure_product\n"
    "rng = np.random.default_rng(3)\n"
    "A, B = rng.uniform(-1, 1, (200, 3)), rng.uniform(-1, 1, (200, 2))\n"
    "run = run_secure_product(A, B, precision_bits=16, keypair=generate_keypair(1024, allow_insecure=True),\n"
    "                         workers=WORKERS, key_bits=1024, allow_insecure=True)\n"
    "print(json.dumps([native.IMPLEMENTATION, run.combined().tolist()]))\n")


@pytest.mark.parametrize("how, workers", [("import fails", 1), ("VFL_PURE_PYTHON", 2)])
def test_without_the_extension_whole_products_fall_back_to_python_and_are_exact(how, workers):
    """The fallback as a user meets it: the extension cannot be imported at all (a machine without a compiler), or
    VFL_PURE_PYTHON=1 reaches the process-pool workers too (an in-process monkeypatch would not): a whole product,
    in a fresh interpreter, is exact and the same as with the default loops."""
    code = _POOL_PRODUCT.replace("WORKERS", str(workers))
    if how == "import fails":
        code = "import sys; sys.modules['vfl.secure._fastloops'] = None\n" + code
        fallback = json.loads(_run(code, VFL_PURE_PYTHON="0"))
    else:
        fallback = json.loads(_run(code, VFL_PURE_PYTHON="1"))
    default = json.loads(_run(_POOL_PRODUCT.replace("WORKERS", str(workers)), VFL_PURE_PYTHON="0"))
    assert fallback[0].startswith("pure Python") and fallback[1] == default[1]
    rng = np.random.default_rng(3)
    A, B = rng.uniform(-1, 1, (200, 3)), rng.uniform(-1, 1, (200, 2))
    assert fallback[1] == to_fixed_point_ints(A, 16, 1.0).T.dot(to_fixed_point_ints(B, 16, 1.0)).tolist()


# ----------------------------------------------------------------------------- issue 34: batched CRT encryption
@needs_c
def test_the_key_holder_task_encrypts_in_one_c_call_with_the_same_bytes(keypair, monkeypatch):
    """With the C tables, a task's CRT short-exponent encryptions are one ``crt_encrypt`` call, and its frame is the
    frame of the per-ciphertext Python loop (and of plain pow) for the same randomness."""
    pk, sk = keypair
    monkeypatch.setattr(executors, "_TASK_ENCRYPTERS", {})
    holder = fastmath.Encrypter(pk.n, p=sk.p, q=sk.q)
    rows = np.random.default_rng(34).integers(0, 2**20, (30, 3))
    draws = [random.Random(100 + i).getrandbits(fastmath.SHORT_EXPONENT_BITS) for i in range(60)]
    width = ciphertext_byte_length(pk)
    calls = []
    real = native.crt_encrypt
    monkeypatch.setattr(native, "crt_encrypt", lambda *a, **k: calls.append(1) or real(*a, **k))
    frame = executors.encrypt_rows_task(holder.task_state(with_factors=True), rows, [(0, 2), (2, 3)], 30, draws,
                                        False, width)
    assert calls == [1]
    enc = executors._TASK_ENCRYPTERS[holder.task_state(with_factors=True)]
    assert isinstance(enc._crt_tables[0], native.CFixedBaseTable)
    monkeypatch.setattr(enc, "_crt_tables", tuple(FixedBaseTable(int(holder.h_s) % int(t.modulus), t.modulus,
                                                                 fastmath.SHORT_EXPONENT_BITS, t.window)
                                                  for t in enc._crt_tables))
    from vfl.secure.packing import pack

    plaintexts = [pack(r[lo:hi], 30) for r in rows.tolist() for lo, hi in [(0, 2), (2, 3)]]
    assert enc.encrypt_frame(plaintexts, draws, width) == frame   # the Python loop, Python tables
    assert frame == _reference_frames(int(pk.n), int(holder.h_s), rows, draws, width)


@needs_c
def test_crt_encrypt_refuses_what_its_tables_cannot_take(keypair):
    """An exponent longer than the tables or a plaintext not below n is refused (ValueError), never truncated."""
    pk, sk = keypair
    enc = fastmath.Encrypter(pk.n, p=sk.p, q=sk.q)
    enc.prepare(1000)
    tp, tq = enc._crt_tables
    width = ciphertext_byte_length(pk)
    ok = native.crt_encrypt(tp, tq, [5], [7], enc.n, enc.p2_inv_q2, width)
    assert len(ok) == width
    with pytest.raises(ValueError, match="more bits than the tables|fit their tables"):
        native.crt_encrypt(tp, tq, [5], [1 << (tp.window * tp.n_windows)], enc.n, enc.p2_inv_q2, width)
    with pytest.raises(ValueError, match="not below n"):
        native.crt_encrypt(tp, tq, [int(pk.n)], [7], enc.n, enc.p2_inv_q2, width)
    with pytest.raises(ValueError, match="non-negative"):
        native.crt_encrypt(tp, tq, [-1], [7], enc.n, enc.p2_inv_q2, width)


def test_table_windows_grow_with_the_planned_encryptions_within_the_memory_cap():
    """Issue 34: the fixed-base window follows the whole stream's encryptions (13 bits at 10^5 for 2048-bit keys,
    where the cap of 10 bits stood before), and no window whose table exceeds the cap is ever chosen."""
    bits = fastmath.SHORT_EXPONENT_BITS
    assert fastmath.best_table_window(8192, bits) == 10
    assert fastmath.best_table_window(100_000, bits) == 13
    for count in (10**5, 10**6, 10**8):
        c = fastmath.best_table_window(count, bits)
        assert -(-bits // c) * (1 << c) * fastmath.TABLE_ENTRY_BYTES <= fastmath.TABLE_BYTES_CAP
    assert fastmath.best_table_window(10**8, bits, cap_bytes=1 << 40) == 16


# ----------------------------------------------------------------------------- review7: a stale compiled extension
@needs_c
def test_a_stale_extension_without_crt_encrypt_falls_back_with_one_clear_line(keypair, monkeypatch):
    """An extension built before ``crt_encrypt`` existed (an old build left in place, ``pip install -e .`` not re-run)
    is not used: the loader names what it lacks and how to rebuild in one line, and the key holder's encryptions run
    in Python with the same bytes -- never an AttributeError in the middle of a run."""
    import types

    real = sys.modules["vfl.secure._fastloops"]
    stale = types.ModuleType("vfl.secure._fastloops")
    for name in ("Buckets", "FixedBase", "GMP_VERSION", "GMP_REDC_N", "mulmod_repeat"):
        setattr(stale, name, getattr(real, name))
    monkeypatch.setitem(sys.modules, "vfl.secure._fastloops", stale)
    monkeypatch.setattr(sys.modules["vfl.secure"], "_fastloops", stale, raising=False)
    module, line = native._load()
    assert module is None and "\n" not in line
    assert "crt_encrypt" in line and "pip install -e ." in line
    monkeypatch.setattr(native, "fastloops", module)
    monkeypatch.setattr(native, "IMPLEMENTATION", line)
    monkeypatch.setattr(executors, "_TASK_ENCRYPTERS", {})
    pk, sk = keypair
    holder = fastmath.Encrypter(pk.n, p=sk.p, q=sk.q)
    rows = np.random.default_rng(7).integers(0, 2**20, (30, 3))
    draws = [random.Random(700 + i).getrandbits(fastmath.SHORT_EXPONENT_BITS) for i in range(60)]
    width = ciphertext_byte_length(pk)
    frame = executors.encrypt_rows_task(holder.task_state(with_factors=True), rows, [(0, 2), (2, 3)], 30, draws,
                                        False, width, 10**5)
    assert frame == _reference_frames(int(pk.n), int(holder.h_s), rows, draws, width)


@needs_c
def test_another_thread_runs_while_crt_encrypt_works(keypair):
    """With ``--workers 1`` the key holder's encryption tasks run inline on the party's worker thread, so one
    ``crt_encrypt`` call (a whole task) must release the GIL as the other C loops do, or the party's heartbeat
    thread stops for the whole task. A ticker thread's largest gap must be a small part of the call's time (with the
    GIL held it is the whole call)."""
    import threading
    import time

    pk, sk = keypair
    enc = fastmath.Encrypter(pk.n, p=sk.p, q=sk.q)
    enc.prepare(10**5)
    tp, tq = enc._crt_tables
    width = ciphertext_byte_length(pk)
    count = 6000
    rng = random.Random(71)
    alphas = [rng.getrandbits(fastmath.SHORT_EXPONENT_BITS) for _ in range(count)]
    plains = [rng.randrange(int(pk.n)) for _ in range(count)]
    ticks: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    start = time.monotonic()
    native.crt_encrypt(tp, tq, plains, alphas, enc.n, enc.p2_inv_q2, width)
    end = time.monotonic()
    stop.set()
    thread.join(10)
    during = [t for t in ticks if start <= t <= end]
    gaps = [b - a for a, b in zip([start, *during], [*during, end], strict=True)]
    assert len(during) >= 3 and max(gaps) < (end - start) / 2, (max(gaps), end - start)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_both_encryption_paths_refuse_a_plaintext_not_below_n(impl, keypair):
    """``Enc(m)`` is only defined for ``0 <= m < n``: the C call refuses ``m >= n``, and the Python loop of
    :meth:`Encrypter.encrypt_frame` must too (it encrypted ``m mod n`` silently: a different frame, not an error)."""
    pk, sk = keypair
    enc = fastmath.Encrypter(pk.n, p=sk.p, q=sk.q)
    enc.prepare(10**4)
    width = ciphertext_byte_length(pk)
    assert len(enc.encrypt_frame([int(pk.n) - 1], [7], width)) == width
    for bad in (int(pk.n), int(pk.n) + 5, -1):
        with pytest.raises(ValueError, match="not below n|non-negative"):
            enc.encrypt_frame([bad], [7], width)


@needs_c
def test_crt_encrypt_matches_plain_pow_at_the_edges_of_both_ranges(keypair):
    """``alpha`` in {0, 1, 2^256 - 1} (all-zero digits, one digit, every digit full) and ``m`` in {0, 1, n - 1}: the C
    call's bytes equal ``(1 + m n) h_s^alpha mod n^2`` computed with plain ``pow``."""
    pk, sk = keypair
    enc = fastmath.Encrypter(pk.n, p=sk.p, q=sk.q)
    enc.prepare(10**5)
    tp, tq = enc._crt_tables
    n, width = int(pk.n), ciphertext_byte_length(pk)
    alphas = [0, 1, (1 << fastmath.SHORT_EXPONENT_BITS) - 1]
    pairs = [(m, a) for m in (0, 1, n - 1) for a in alphas]
    got = native.crt_encrypt(tp, tq, [m for m, _ in pairs], [a for _, a in pairs], n, enc.p2_inv_q2, width)
    want = b"".join(((1 + m * n) * pow(int(enc.h_s), a, n * n) % (n * n)).to_bytes(width, "big") for m, a in pairs)
    assert got == want
