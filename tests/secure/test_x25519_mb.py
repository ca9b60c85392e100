"""The optional eight-lane X25519 (Intel crypto_mb's mbx_x25519_mb8, vfl.secure.x25519_mb) against libsodium.

Invariant: the PSI points are the same bytes whichever backend computes them (so parties with and without the
library align the same rows), and every input libsodium's path refuses is refused on the eight-lane path too.
Tests that call the library skip with the reason where ``ipp-crypto`` is not installed or the CPU lacks AVX-512 IFMA;
the fallback tests run everywhere.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import nacl.bindings as nb
import pytest

from vfl.exceptions import ProtocolError
from vfl.secure import x25519_mb
from vfl.secure.psi import POINT_BYTES, BlindingKey, hash_to_group, split_points

P = 2**255 - 19
MB = x25519_mb.load()
needs_mb = pytest.mark.skipif(
    MB is None, reason="crypto_mb not usable here: pip install 'vfl[psi-fast]' (ipp-crypto) on a CPU with AVX-512 IFMA"
    if x25519_mb.library_path() is None or not x25519_mb.cpu_has_ifma() else "crypto_mb failed its self-check")


def _u(value: int) -> bytes:
    return (value % 2**256).to_bytes(POINT_BYTES, "little")


def _on_curve(u: int) -> bool:
    return pow((u**3 + 486662 * u**2 + u) % P, (P - 1) // 2, P) != P - 1


def _sodium(key: bytes, us: list[bytes]) -> bytes:
    return b"".join(nb.crypto_scalarmult(key, u) for u in us)


@needs_mb
@pytest.mark.parametrize("n", [1, 7, 8, 9, 16, 61])
def test_random_points_are_bit_identical_to_libsodium(n):
    """Subgroup points (the PSI hash), whole-curve points (cofactor part), unclamped random keys, every padding."""
    assert MB is not None
    key = secrets.token_bytes(32)
    us = [hash_to_group(secrets.token_hex(8)) for _ in range(n // 2)]
    while len(us) < n:
        u = secrets.randbelow(P)
        if _on_curve(u) and u > 1:
            us.append(_u(u))
    got, status = MB.scalarmult(key, b"".join(us))
    assert status == 0 and got == _sodium(key, us)


@needs_mb
def test_edge_inputs_match_libsodium_at_the_binding():
    """Top bit set (RFC 7748 masks it) and u >= p with a small reduction: the same bytes as libsodium. (The PSI
    code refuses both encodings before any multiplication: tests/secure/test_secure_psi.py.)"""
    assert MB is not None
    key = secrets.token_bytes(32)
    h = hash_to_group("edge")
    us = [_u(int.from_bytes(h, "little") | 1 << 255), _u(P + 9), _u(9)]
    got, status = MB.scalarmult(key, b"".join(us))
    assert status == 0 and got == _sodium(key, us)


#: canonical u-coordinates of points ON Curve25519 (not small order) just below p, where crypto_mb 2026.2.0's
#: mbx_x25519_mb8 returns a result that differs from libsodium's (and from RFC 7748's ladder) for most keys
NEAR_P = [P - d for d in range(3, 200) if _on_curve(P - d)][:24]


@needs_mb
def test_hostile_points_near_p_are_reblinded_by_libsodium():
    """Attacker: a peer sends valid curve points crypto_mb mishandles, to make a party output a faulty multiple of
    its key. reblind must return libsodium's bytes for them (it never routes peer points through crypto_mb); the
    library's own result differs for at least one of them (what the invariant guards against) in crypto_mb 2026.2;
    a later release that fixes it must not turn CI red (the invariant does not depend on the bug), so the library's
    own result is only compared where the installed release is one known to have it."""
    import importlib.metadata

    assert MB is not None
    key = BlindingKey(backend=MB, workers=1)
    blob = b"".join(_u(u) for u in NEAR_P)
    assert key.reblind(blob) == _sodium(key._key, [_u(u) for u in NEAR_P])
    raw, _ = MB.scalarmult(key._key, blob)
    if importlib.metadata.version("ipp-crypto") == "2026.2.0":
        assert raw != _sodium(key._key, [_u(u) for u in NEAR_P])


@needs_mb
@pytest.mark.parametrize("where", [0, 3, 7, 8, 12])
def test_small_order_points_are_refused_in_every_lane(where):
    """crypto_mb returns all-zero bytes for a point of small order (flagged only in its status word); vfl refuses
    the list as on libsodium's path, wherever in a group of eight the point sits, including the padded last one."""
    assert MB is not None
    small = [0, 1, 325606250916557431795983626356110631294008115727848805560023387167927233504,
             39382357235489614581723060781553021112529911719440698176882885853963445705823]
    key = BlindingKey(workers=1, backend=MB)
    points = [hash_to_group(f"id{i}") for i in range(13)]
    for u in small:
        raw, _ = MB.scalarmult(key._key, _u(u))
        assert raw == bytes(32)
        bad = points[:where] + [_u(u)] + points[where:]
        with pytest.raises(ProtocolError, match="small order"):
            key._mult_all(bad, own=True)      # the eight-lane path itself (reblind uses libsodium)
        with pytest.raises(ProtocolError, match="small order"):
            key.reblind(b"".join(bad))


@needs_mb
def test_threaded_blinding_on_crypto_mb_is_libsodiums_bytes():
    """Several CHUNKs on a thread pool of the shared MultiBuffer (ctypes releases the GIL; every call has its own
    buffers): the same bytes, in order, as one-by-one libsodium."""
    from vfl.secure.psi import CHUNK

    ids = [secrets.token_hex(5) for _ in range(2 * CHUNK + 11)]
    key = BlindingKey(backend=MB, workers=3)
    assert key.blind(ids) == _sodium(key._key, [hash_to_group(x) for x in ids])


@needs_mb
def test_mixed_backends_align_the_exact_intersection():
    """A party on crypto_mb and a party on libsodium get the same fully blinded points: exact intersection."""
    shared = [secrets.token_hex(6) for _ in range(300)]
    xs = shared + [secrets.token_hex(6) for _ in range(700)]
    ys = [secrets.token_hex(6) for _ in range(500)] + shared[:200]
    a, b = BlindingKey(backend=MB), BlindingKey(backend=None)
    fa = split_points(b.reblind(a.blind(xs)))
    fb = set(split_points(a.reblind(b.blind(ys))))
    assert {x for x, p in zip(xs, fa, strict=True) if p in fb} == set(xs) & set(ys)
    same_key = BlindingKey(a._key, backend=None, workers=2)
    assert same_key.blind(xs) == a.blind(xs) and same_key.reblind(a.blind(ys)) == a.reblind(a.blind(ys))


def test_a_missing_or_foreign_library_falls_back_to_libsodium(tmp_path):
    """The loader pointed at a missing file, at a shared library without mbx_x25519_mb8, or at a distribution that
    is not installed gives no backend, and the PSI key then computes libsodium's bytes."""
    import ctypes.util

    assert x25519_mb.load(tmp_path / "libcrypto_mb.so") is None
    libm = ctypes.util.find_library("m")
    if libm and Path(f"/lib/x86_64-linux-gnu/{libm}").is_file():
        assert x25519_mb.load(Path(f"/lib/x86_64-linux-gnu/{libm}")) is None
    assert x25519_mb._dist_file("vfl-no-such-distribution", "libcrypto_mb.so") is None
    key = BlindingKey(backend=x25519_mb.load(tmp_path / "missing.so"))
    assert key.backend is None
    ids = ["a", "b", "c"]
    assert key.blind(ids) == _sodium(key._key, [hash_to_group(x) for x in ids])


def test_cpu_flag_is_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512ifma avx512vl\n")
    assert x25519_mb.cpu_has_ifma(info)
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512ifmax\n")
    assert not x25519_mb.cpu_has_ifma(info)
    assert not x25519_mb.cpu_has_ifma(tmp_path / "absent")


def test_backend_argument_is_checked():
    with pytest.raises(ValueError, match="backend"):
        BlindingKey(backend="fast")


def _plant_distribution(where: Path) -> Path:
    """An ``ipp_crypto`` distribution whose RECORD names a library of the planter's choosing (any file will do: the
    lookup is what is tested, nothing is loaded from it)."""
    lib = where / "libcrypto_mb.so"
    lib.write_bytes(b"\x7fELF not really")
    info = where / "ipp_crypto-9999.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ipp-crypto\nVersion: 9999.0\n")
    (info / "RECORD").write_text(f"{lib},,\n")
    return lib


def test_library_is_never_taken_from_the_current_directory_or_pythonpath(tmp_path):
    """Attacker: can write to the directory a party is started from (``python -m`` / ``python -c`` put it first on
    sys.path) or to a PYTHONPATH entry, and plants an ``ipp_crypto`` dist-info whose RECORD names its own .so. The
    loader must only take the distribution from site-packages, so it never names (let alone dlopens) that file."""
    import os
    import subprocess
    import sys

    cwd, pp = tmp_path / "cwd", tmp_path / "pythonpath"
    cwd.mkdir()
    pp.mkdir()
    planted = {str(_plant_distribution(cwd)), str(_plant_distribution(pp))}
    env = {**os.environ, "PYTHONPATH": str(pp), "LD_LIBRARY_PATH": f"{pp}:"}
    out = subprocess.run([sys.executable, "-c", "from vfl.secure import x25519_mb; print(x25519_mb.library_path())"],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout.strip()
    assert out not in planted
    assert out == str(x25519_mb.library_path())   # the same answer as this process's: site-packages or None


@needs_mb
def test_runtime_libraries_are_never_searched_for(tmp_path):
    """Attacker: controls a directory on LD_LIBRARY_PATH (or an empty entry, i.e. the start directory) and puts
    Intel runtime libraries of its choosing there (here: byte copies of the real ones, so that loading them works
    and shows). An environment with ``ipp-crypto`` but without ``intel-cmplr-lib-rt`` (the wheel does not require
    it) must fall back to libsodium, not let the dynamic loader search for libimf.so & co."""
    import os
    import shutil
    import subprocess
    import sys
    import sysconfig

    lib = x25519_mb.library_path()
    assert lib is not None
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=600)
    site_dir = venv / Path(sysconfig.get_paths()["purelib"]).relative_to(sysconfig.get_paths()["data"])
    shutil.copy(lib, venv / "lib" / lib.name)               # ipp-crypto installed here, its runtime not
    info = site_dir / "ipp_crypto-2026.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ipp-crypto\nVersion: 2026.2.0\n")
    (info / "RECORD").write_text(f"../../{lib.name},,\n")   # as the wheel's own RECORD
    repo = Path(__file__).resolve().parents[2]
    (site_dir / "vfl_deps.pth").write_text(f"{repo}\n{sysconfig.get_paths()['purelib']}\n")   # vfl, nacl, numpy
    evil = tmp_path / "ld_path"
    evil.mkdir()
    for name in x25519_mb._RUNTIME:
        found = x25519_mb._dist_file(x25519_mb._RUNTIME_DIST, name) or lib.parent / name
        shutil.copy(found, evil / name)
    maps = f"sum({str(evil)!r} in ln for ln in open('/proc/self/maps'))"
    probe = f"from vfl.secure import x25519_mb as m; b = m.load(); print(m.library_path(), b is not None, {maps})"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "LD_LIBRARY_PATH": str(evil)}, timeout=600, check=True).stdout.split()
    assert out[0] == str(venv / "lib" / lib.name)           # the test environment is what it claims to be
    assert out[1:] == ["False", "0"]                         # no backend, nothing mapped from the attacker's dir
