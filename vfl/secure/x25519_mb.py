"""Optional eight-lane X25519 for the PSI ring: Intel's ``mbx_x25519_mb8`` from the ``ipp-crypto`` wheel (crypto_mb).

X25519 (RFC 7748 section 5) is ``X25519(k, u) = u([c(k)] P)`` with the clamped scalar ``c(k)`` and ``P`` any point
whose u-coordinate is ``u``: the x-only Montgomery ladder. Intel's crypto_mb library (part of Intel Cryptography
Primitives, Apache-2.0, shipped on PyPI as ``ipp-crypto``) computes eight independent ladders at once, one per
52-bit lane group of the AVX-512 IFMA instructions (Drucker & Gueron, "Fast modular squaring with AVX512IFMA",
2019; the multi-buffer layout of Gueron & Krasnov); SecretFlow's SPU uses the same call for its ECDH-PSI.

This module is a thin ctypes binding and nothing more: :class:`MultiBuffer` lays n u-coordinates out in one buffer,
pads the last group of eight with the base point ``u = 9``, calls ``mbx_x25519_mb8`` once per eight, and returns
the n results in input order. It does not validate points (vfl.secure.psi does, before and after): libsodium's
``crypto_scalarmult`` refuses an all-zero result (an input of small order), crypto_mb may not, so the caller checks
the output itself. The bit-identity with libsodium's ``crypto_scalarmult`` for the same key and u is what
vfl.secure.psi relies on; :func:`load` checks it on random and fixed inputs before it returns a backend.

Where it is used (:func:`load`): only when the ``ipp-crypto`` distribution is installed in this Python (the library
is found through that distribution's own file list, ``<prefix>/lib/libcrypto_mb.so``, never on a system path, and
the distribution only in site-packages, never through the current directory or PYTHONPATH; its Intel runtime
likewise from ``intel-cmplr-lib-rt`` or next to it, never searched for by the dynamic loader),
the CPU reports AVX-512 IFMA (``avx512ifma`` in /proc/cpuinfo; without it the library would fall back to slower
AVX2 code), and the self-check passes. Otherwise vfl.secure.psi uses libsodium exactly as before.
``pip install 'vfl[psi-fast]'`` installs the wheel.

ctypes releases the GIL during the foreign call, so vfl.secure.psi's thread pool runs these calls on every core.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import secrets
import site
import sysconfig
from pathlib import Path

import nacl.bindings as sodium

__all__ = ["LANES", "MultiBuffer", "library_path", "cpu_has_ifma", "load"]

#: independent ladders per ``mbx_x25519_mb8`` call
LANES = 8
_POINT = 32
_BASE_U = (9).to_bytes(_POINT, "little")   # the X25519 base point, used to pad the last group of eight
_DIST = "ipp-crypto"
_LIBNAME = "libcrypto_mb.so"
#: the Intel compiler runtime libcrypto_mb.so links against (no RPATH in the wheel, so they are loaded first, from
#: the ``intel-cmplr-lib-rt`` distribution, dependencies before dependants; RTLD_LOCAL: the loader matches
#: libcrypto_mb's needs by soname, and libimf's math functions never replace libm's for modules loaded later)
_RUNTIME_DIST = "intel-cmplr-lib-rt"
_RUNTIME = ("libintlc.so.5", "libimf.so", "libsvml.so", "libirng.so")


def _install_dirs() -> list[str]:
    """The directories pip installs distributions into for this interpreter: site-packages (and the user's, where
    enabled). Not ``sys.path``: that may start with the current directory (``python -m``, ``python -c``) or hold
    PYTHONPATH entries, where anyone who can write a ``ipp_crypto-*.dist-info`` would choose the library we load."""
    paths = sysconfig.get_paths()
    dirs = [*site.getsitepackages(), paths["purelib"], paths["platlib"]]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return list(dict.fromkeys(dirs))


def _dist_file(dist_name: str, file_name: str) -> Path | None:
    """The installed file ``file_name`` of distribution ``dist_name`` (pip puts a wheel's data files under the
    environment's prefix, here ``<prefix>/lib/``, and lists them in the distribution's RECORD), or None. Only a
    distribution in :func:`_install_dirs` counts."""
    dist = next(iter(importlib.metadata.distributions(name=dist_name, path=_install_dirs())), None)
    if dist is None:
        return None
    for f in dist.files or []:
        if f.name == file_name:
            path = Path(str(dist.locate_file(f))).resolve()
            return path if path.is_file() else None
    return None


def library_path() -> Path | None:
    """``libcrypto_mb.so`` of the installed ``ipp-crypto`` distribution, or None."""
    return _dist_file(_DIST, _LIBNAME)


def cpu_has_ifma(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """The CPU reports AVX-512 IFMA (Linux's ``avx512ifma`` flag); False where that cannot be read."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and "avx512ifma" in line.split() for line in text.splitlines())


def _clamp(key: bytes) -> bytes:
    """RFC 7748's ``decodeScalar25519``: clear bits 0-2 and 255, set bit 254 (idempotent; libsodium does the
    same inside ``crypto_scalarmult``)."""
    k = bytearray(key)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    return bytes(k)


class MultiBuffer:
    """``mbx_x25519_mb8`` of one loaded ``libcrypto_mb.so``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        for name in _RUNTIME:                 # next to the library first (one prefix), else the runtime's own list
            dep = path.parent / name if (path.parent / name).is_file() else _dist_file(_RUNTIME_DIST, name)
            if dep is None:   # else the dynamic loader would search LD_LIBRARY_PATH and the system for it
                raise OSError(f"{name} (crypto_mb's Intel runtime) is not installed next to {path} or by "
                              f"{_RUNTIME_DIST}")
            ctypes.CDLL(str(dep), mode=ctypes.RTLD_LOCAL)   # found by soname, not exported to others
        lib = ctypes.CDLL(str(path))          # OSError if it (or a runtime library it needs) cannot be loaded
        fn = lib.mbx_x25519_mb8
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_uint32
        self._fn = fn

    def scalarmult(self, key: bytes, points: bytes) -> tuple[bytes, int]:
        """``X25519(key, u)`` for every 32-byte u of ``points`` (concatenated), in input order, and the OR of the
        library's status words (0: every lane reported success). Outputs are not checked here (module docstring)."""
        if len(key) != _POINT or len(points) % _POINT:
            raise ValueError("X25519 takes a 32-byte key and 32-byte points")
        n = len(points) // _POINT
        if n == 0:
            return b"", 0
        groups = -(-n // LANES)
        src = ctypes.create_string_buffer(points + _BASE_U * (groups * LANES - n), groups * LANES * _POINT)
        dst = ctypes.create_string_buffer(groups * LANES * _POINT)
        k = ctypes.create_string_buffer(_clamp(key), _POINT)
        ptr_array = ctypes.c_void_p * (groups * LANES)
        a_src, a_dst, a_k = ctypes.addressof(src), ctypes.addressof(dst), ctypes.addressof(k)
        src_ptrs = ptr_array(*(a_src + _POINT * i for i in range(groups * LANES)))
        dst_ptrs = ptr_array(*(a_dst + _POINT * i for i in range(groups * LANES)))
        key_ptrs = (ctypes.c_void_p * LANES)(*([a_k] * LANES))
        p_src, p_dst, stride = ctypes.addressof(src_ptrs), ctypes.addressof(dst_ptrs), LANES * ctypes.sizeof(
            ctypes.c_void_p)
        status, fn, p_key = 0, self._fn, ctypes.addressof(key_ptrs)
        for g in range(groups):
            status |= fn(p_dst + g * stride, p_key, p_src + g * stride)
        return dst.raw[:n * _POINT], status


def _agrees(backend: MultiBuffer) -> bool:
    """The backend equals libsodium's ``crypto_scalarmult`` on random (unclamped) keys and random points of the
    prime-order subgroup, one group of eight and groups that need padding (tests/secure/test_x25519_mb.py covers
    whole-curve and edge inputs)."""
    for n in (1, LANES, 2 * LANES + 3):
        key = secrets.token_bytes(_POINT)
        us = [sodium.crypto_scalarmult_base(secrets.token_bytes(_POINT)) for _ in range(n)]
        got, status = backend.scalarmult(key, b"".join(us))
        if status != 0 or got != b"".join(sodium.crypto_scalarmult(key, u) for u in us):
            return False
    return True


def load(path: Path | None = None) -> MultiBuffer | None:
    """The eight-lane backend, or None where it must not be used: no ``ipp-crypto`` distribution (or ``path``
    missing), a CPU without AVX-512 IFMA, a library that cannot be loaded or lacks the call, or one whose results
    differ from libsodium's on the self-check. ``path`` overrides the distribution's library (tests)."""
    if path is None:
        path = library_path()
    if path is None or not Path(path).is_file() or not cpu_has_ifma():
        return None
    try:
        backend = MultiBuffer(Path(path))
    except (OSError, AttributeError):
        return None
    return backend if _agrees(backend) else None
