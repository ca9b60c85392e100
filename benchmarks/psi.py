"""Row alignment by private set intersection: vfl's protocol vs openmined-psi's own client/server (the floor).

    python benchmarks/psi.py [--sizes 10000,100000] [--repeats 1] [--overlap 0.5] [--parties 2] [--primitives]

For each size n, every party holds n random string IDs (a fraction ``--overlap`` shared by all, each party's list
shuffled independently). Two timings, same IDs, same process, run one after the other:

* ``floor``: openmined-psi's own ECDH-PSI, client with ``reveal_intersection=True`` against a server with a RAW
  (exact, sorted) setup message: ``CreateSetupMessage`` + ``CreateRequest`` + ``ProcessRequest`` +
  ``GetIntersection`` -- the library's minimal work for ONE side (the client) to learn the intersection;
* ``vfl``: :func:`vfl.protocols.alignment.align_in_process` -- every party's and the coordinator's state machine
  in one process (normalisation and checks, blinding, re-blinding, the coordinator's intersection and ordering),
  after which EVERY party knows its common rows in the agreed order.

Both do 2 hash-to-curve + 2 exponentiations per ID for K = 2 on the same P-256 code, single-threaded; wall time
and CPU time are printed (on a shared machine the CPU-time ratio is the steadier one). The issue's target is
vfl / floor <= 1.5 at 10^6 x 10^6. ``--primitives`` also times the per-ID operations of the alternatives that were
considered (ristretto255 through the system libsodium via ctypes, Ed25519 through PyNaCl) at the first size.
Results: docs/psi.md.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_ids(n: int, overlap: float, parties: int) -> list[list[str]]:
    shared = [secrets.token_hex(8) for _ in range(int(round(overlap * n)))]
    lists = []
    for _ in range(parties):
        own = shared + [secrets.token_hex(8) for _ in range(n - len(shared))]
        rng = secrets.SystemRandom()
        rng.shuffle(own)
        lists.append(own)
    return lists


def floor_seconds(client_ids: list[str], server_ids: list[str]) -> tuple[float, float, int]:
    import private_set_intersection.python as psi

    start, cpu = time.perf_counter(), time.process_time()
    client = psi.client.CreateWithNewKey(True)
    server = psi.server.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(1e-9, len(client_ids), server_ids, psi.DataStructure.RAW)
    request = client.CreateRequest(client_ids)
    response = server.ProcessRequest(request)
    common = client.GetIntersection(setup, response)
    return time.perf_counter() - start, time.process_time() - cpu, len(common)


def vfl_seconds(lists: list[list[str]]) -> tuple[float, float, int]:
    from vfl.protocols.alignment import align_in_process

    start, cpu = time.perf_counter(), time.process_time()
    rows = align_in_process(lists)
    return time.perf_counter() - start, time.process_time() - cpu, len(rows[0])


def primitives(n: int) -> None:
    """Per-ID cost of 'hash to the group + one exponentiation' and of 'one exponentiation' for each backend."""
    import ctypes
    import ctypes.util
    import hashlib

    import nacl.bindings as nb

    from vfl.secure.psi import BlindingKey

    ids = [secrets.token_hex(8) for _ in range(n)]
    key = BlindingKey()
    t = time.process_time()
    blob = key.blind(ids)
    t_hash = time.process_time() - t
    t = time.process_time()
    key.reblind(blob)
    t_exp = time.process_time() - t
    print(f"{'openmined-psi P-256 (C++ batch)':44s} {1e6 * t_hash / n:8.1f} {1e6 * t_exp / n:8.1f}")

    scalar = nb.crypto_core_ed25519_scalar_reduce(secrets.token_bytes(64))
    t = time.process_time()
    pts = [nb.crypto_scalarmult_ed25519_noclamp(
        scalar, nb.crypto_core_ed25519_from_uniform(hashlib.sha512(x.encode()).digest()[:32])) for x in ids]
    t_hash = time.process_time() - t
    t = time.process_time()
    for p in pts:
        nb.crypto_scalarmult_ed25519_noclamp(scalar, p)
    t_exp = time.process_time() - t
    print(f"{'PyNaCl Ed25519 (per-ID Python calls)':44s} {1e6 * t_hash / n:8.1f} {1e6 * t_exp / n:8.1f}")

    path = ctypes.util.find_library("sodium")
    lib = ctypes.CDLL(path) if path else None
    if lib is None or not hasattr(lib, "crypto_scalarmult_ristretto255"):
        print("ristretto255: no system libsodium with ristretto255 (PyNaCl does not expose it)")
        return
    lib.sodium_init()
    sk, out, h = (ctypes.create_string_buffer(32) for _ in range(3))
    lib.crypto_core_ristretto255_scalar_random(sk)
    t = time.process_time()
    rpts = []
    for x in ids:
        lib.crypto_core_ristretto255_from_hash(h, hashlib.sha512(x.encode()).digest())
        lib.crypto_scalarmult_ristretto255(out, sk, h)
        rpts.append(out.raw)
    t_hash = time.process_time() - t
    t = time.process_time()
    for p in rpts:
        lib.crypto_scalarmult_ristretto255(out, sk, p)
    t_exp = time.process_time() - t
    print(f"{'libsodium ristretto255 (ctypes, per ID)':44s} {1e6 * t_hash / n:8.1f} {1e6 * t_exp / n:8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated IDs per party (e.g. 10000,100000,1000000)")
    ap.add_argument("--overlap", type=float, default=0.5, help="fraction of each party's IDs common to all parties")
    ap.add_argument("--parties", type=int, default=2, help="parties in the vfl run (the floor is always 2-party)")
    ap.add_argument("--repeats", type=int, default=1, help="alternating floor/vfl runs per size; medians printed")
    ap.add_argument("--primitives", action="store_true", help="also time the per-ID operations of the alternatives")
    args = ap.parse_args()
    if args.parties < 2:
        ap.error("--parties must be at least 2")
    from vfl.protocols.alignment import align_in_process  # noqa: F401  (import vfl before any timing)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.primitives:
        print(f"per-ID CPU microseconds at n = {sizes[0]}:{'':11s} hash+exp      exp")
        primitives(sizes[0])
        print()
    print(f"{'IDs/party':>10s} {'common':>8s} {'floor s':>9s} {'vfl s':>9s} {'ratio':>6s} {'floor cpu':>10s} "
          f"{'vfl cpu':>9s} {'ratio':>6s}   (K = {args.parties}; wall and CPU seconds, medians of {args.repeats})")
    for n in sizes:
        floors, vfls = [], []
        for _ in range(args.repeats):
            lists = make_ids(n, args.overlap, max(2, args.parties))
            *t_floor, c_floor = floor_seconds(lists[0], lists[1])
            *t_vfl, c_vfl = vfl_seconds(lists[:args.parties])
            if args.parties == 2 and c_floor != c_vfl:
                raise SystemExit(f"intersection sizes differ: floor {c_floor}, vfl {c_vfl}")
            floors.append(t_floor)
            vfls.append(t_vfl)
        fw, fc = (statistics.median(t[i] for t in floors) for i in (0, 1))
        vw, vc = (statistics.median(t[i] for t in vfls) for i in (0, 1))
        print(f"{n:>10d} {c_vfl:>8d} {fw:>9.2f} {vw:>9.2f} {vw / fw:>6.2f} {fc:>10.2f} {vc:>9.2f} {vc / fc:>6.2f}",
              flush=True)


if __name__ == "__main__":
    main()
