"""Row alignment by private set intersection: vfl's protocol vs openmined-psi's own client/server, and primitives.

    python benchmarks/psi.py [--sizes 10000,100000] [--repeats 1] [--overlap 0.5] [--parties 2]
    python benchmarks/psi.py --primitives 20000 [--json docs/data/psi_primitives.json]
    python benchmarks/psi.py --markdown docs/data/psi_primitives.json        # the docs' table from the JSON

For each size n, every party holds n random string IDs (a fraction ``--overlap`` shared by all, each party's list
shuffled independently). Two timings, same IDs, same process, run one after the other:

* ``P-256 floor``: openmined-psi's own ECDH-PSI on P-256 (only if ``openmined-psi`` is installed: it is no longer a
  dependency of vfl), client with ``reveal_intersection=True`` against a server with a RAW (exact, sorted) setup
  message -- the library's minimal single-threaded work for ONE side (the client) to learn the intersection;
* ``vfl``: :func:`vfl.protocols.alignment.align_in_process` -- every party's and the coordinator's state machine
  in one process (normalisation and checks, blinding, re-blinding, the coordinator's intersection and ordering),
  after which EVERY party knows its common rows in the agreed order; X25519 on a thread pool of the usable cores.

Wall time and CPU time (all threads) are printed; on a shared machine CPU time is the steadier one.
``--primitives N`` times, on N random IDs and in CPU microseconds per ID, the per-ID operations of each candidate
prime-order group (hash to the group + one scalar multiplication; one scalar multiplication), single-threaded,
each through the library's own calls: what vfl.secure.psi uses (libsodium's Elligator 2 + X25519), the same with
libsodium's checked Edwards-to-Montgomery conversion, Ed25519 ``noclamp`` scalar multiplication, openmined-psi's
P-256 batch calls and ristretto255 through a ctypes binding of a system libsodium (the last two where installed).
Results: docs/psi.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def floor_seconds(client_ids: list[str], server_ids: list[str]) -> tuple[float, float, int] | None:
    """openmined-psi's own P-256 client/server run, or None if the library is not installed."""
    try:
        import private_set_intersection.python as psi
    except ImportError:
        return None

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


def _time(fn: Callable[[], Any]) -> tuple[float, Any]:
    cpu = time.process_time()
    out = fn()
    return time.process_time() - cpu, out


def primitives(n: int) -> list[dict]:
    """Per-ID CPU microseconds of 'hash to the group + one scalar multiplication' and of 'one scalar
    multiplication' for each candidate, single-threaded (rows of the docs' table)."""
    import ctypes
    import ctypes.util
    import hashlib

    import nacl.bindings as nb

    from vfl.secure.psi import DOMAIN, BlindingKey, hash_to_group, montgomery_u

    ids = [secrets.token_hex(8) for _ in range(n)]
    rows = []

    def row(name: str, hashed: float, mult: float) -> None:
        rows.append({"backend": name, "hash_and_mult_us": 1e6 * hashed / n, "mult_us": 1e6 * mult / n})
        print(f"{name:60s} {1e6 * hashed / n:8.1f} {1e6 * mult / n:8.1f}", flush=True)

    key = BlindingKey(workers=1)
    t_hash, blob = _time(lambda: key.blind(ids))
    t_exp, _ = _time(lambda: key.reblind(blob))
    row("vfl: libsodium Elligator 2 + u-map + X25519 (PyNaCl, this tree)", t_hash, t_exp)

    k = secrets.token_bytes(32)
    r = [hashlib.sha512(DOMAIN + x.encode()).digest()[:32] for x in ids]
    t_hash, us = _time(lambda: [nb.crypto_scalarmult(k, nb.crypto_sign_ed25519_pk_to_curve25519(
        nb.crypto_core_ed25519_from_uniform(h))) for h in r])
    t_exp, _ = _time(lambda: [nb.crypto_scalarmult(k, u) for u in us])
    row("libsodium Elligator 2 + pk_to_curve25519 (checked) + X25519", t_hash, t_exp)
    assert nb.crypto_sign_ed25519_pk_to_curve25519(nb.crypto_core_ed25519_from_uniform(r[0])) == hash_to_group(ids[0])

    r2 = [hashlib.sha512(DOMAIN + x.encode()).digest()[32:] for x in ids]
    t_hash, us = _time(lambda: [nb.crypto_scalarmult(k, montgomery_u(nb.crypto_core_ed25519_add(
        nb.crypto_core_ed25519_from_uniform(h), nb.crypto_core_ed25519_from_uniform(g))))
        for h, g in zip(r, r2, strict=True)])
    row("RFC 9380 RO shape: two Elligator 2 maps added + u-map + X25519", t_hash, t_exp)

    scalar = nb.crypto_core_ed25519_scalar_reduce(secrets.token_bytes(64))
    t_hash, pts = _time(lambda: [nb.crypto_scalarmult_ed25519_noclamp(scalar, nb.crypto_core_ed25519_from_uniform(h))
                                 for h in r])
    t_exp, _ = _time(lambda: [nb.crypto_scalarmult_ed25519_noclamp(scalar, p) for p in pts])
    row("libsodium Elligator 2 + Ed25519 noclamp (PyNaCl)", t_hash, t_exp)

    try:
        import private_set_intersection.python as psi_lib
    except ImportError:
        print("openmined-psi P-256: not installed (pip install openmined-psi)")
    else:
        client = psi_lib.client.CreateWithNewKey(True)
        server = psi_lib.server.CreateFromKey(client.GetPrivateKeyBytes(), True)
        t_hash, points = _time(lambda: client.CreateRequest(ids).encrypted_elements)

        def exp() -> Any:
            request = psi_lib.Request()
            request.reveal_intersection = True
            request.encrypted_elements.extend(points)
            return server.ProcessRequest(request)

        t_exp, _ = _time(exp)
        row("openmined-psi P-256 (C++ batch calls)", t_hash, t_exp)

    path = ctypes.util.find_library("sodium")
    lib = ctypes.CDLL(path) if path else None
    if lib is None or not hasattr(lib, "crypto_scalarmult_ristretto255"):
        print("ristretto255: no system libsodium with ristretto255 (PyNaCl does not expose it)")
        return rows
    lib.sodium_init()
    sk, out, h = (ctypes.create_string_buffer(32) for _ in range(3))
    lib.crypto_core_ristretto255_scalar_random(sk)

    def ristretto_hash() -> list[bytes]:
        got = []
        for x in ids:
            lib.crypto_core_ristretto255_from_hash(h, hashlib.sha512(DOMAIN + x.encode()).digest())
            lib.crypto_scalarmult_ristretto255(out, sk, h)
            got.append(out.raw)
        return got

    t_hash, rpts = _time(ristretto_hash)
    t_exp, _ = _time(lambda: [lib.crypto_scalarmult_ristretto255(out, sk, p) for p in rpts])
    row("libsodium ristretto255 (ctypes, system library)", t_hash, t_exp)
    return rows


def primitives_markdown(doc: dict) -> str:
    lines = ["| backend | hash + mult (CPU us per ID) | mult (CPU us per ID) |", "|---|---:|---:|"]
    lines += [f"| {r['backend']} | {r['hash_and_mult_us']:.1f} | {r['mult_us']:.1f} |" for r in doc["rows"]]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated IDs per party (e.g. 10000,100000,1000000)")
    ap.add_argument("--overlap", type=float, default=0.5, help="fraction of each party's IDs common to all parties")
    ap.add_argument("--parties", type=int, default=2, help="parties in the vfl run (the floor is always 2-party)")
    ap.add_argument("--repeats", type=int, default=1, help="alternating floor/vfl runs per size; medians printed")
    ap.add_argument("--primitives", type=int, default=0, metavar="N",
                    help="time the per-ID operations of every candidate group on N IDs instead (0: no)")
    ap.add_argument("--json", type=Path, help="with --primitives: write the rows here")
    ap.add_argument("--markdown", type=Path, help="print the docs' table of a --primitives JSON and exit")
    args = ap.parse_args()
    if args.markdown:
        print(primitives_markdown(json.loads(args.markdown.read_text())))
        return
    if args.parties < 2:
        ap.error("--parties must be at least 2")
    from vfl.protocols.alignment import align_in_process  # noqa: F401  (import vfl before any timing)
    if args.primitives:
        print(f"per-ID CPU microseconds at n = {args.primitives}, one thread:{'':13s} hash+mult    mult")
        rows = primitives(args.primitives)
        if args.json:
            code = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()
            doc = {"command": "python benchmarks/psi.py " + " ".join(sys.argv[1:]), "code": code, "n": args.primitives,
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "load": os.getloadavg()[0], "rows": rows}
            args.json.write_text(json.dumps(doc, indent=1) + "\n")
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'IDs/party':>10s} {'common':>8s} {'floor s':>9s} {'vfl s':>9s} {'ratio':>6s} {'floor cpu':>10s} "
          f"{'vfl cpu':>9s} {'ratio':>6s}   (K = {args.parties}; wall and CPU seconds, medians of {args.repeats}; "
          "floor: openmined-psi P-256, if installed)")
    for n in sizes:
        floors, vfls = [], []
        for _ in range(args.repeats):
            lists = make_ids(n, args.overlap, max(2, args.parties))
            floor = floor_seconds(lists[0], lists[1])
            *t_vfl, c_vfl = vfl_seconds(lists[:args.parties])
            if floor is not None:
                *t_floor, c_floor = floor
                if args.parties == 2 and c_floor != c_vfl:
                    raise SystemExit(f"intersection sizes differ: floor {c_floor}, vfl {c_vfl}")
                floors.append(t_floor)
            vfls.append(t_vfl)
        vw, vc = (statistics.median(t[i] for t in vfls) for i in (0, 1))
        if floors:
            fw, fc = (statistics.median(t[i] for t in floors) for i in (0, 1))
            print(f"{n:>10d} {c_vfl:>8d} {fw:>9.2f} {vw:>9.2f} {vw / fw:>6.2f} {fc:>10.2f} {vc:>9.2f} "
                  f"{vc / fc:>6.2f}", flush=True)
        else:
            print(f"{n:>10d} {c_vfl:>8d} {'-':>9s} {vw:>9.2f} {'-':>6s} {'-':>10s} {vc:>9.2f} {'-':>6s}", flush=True)


if __name__ == "__main__":
    main()
