"""Cost of signing and checking the CAPE sites' Diffie-Hellman values (vfl.protocols.cape_keys) against the same
round unsigned, in process, in one run.

    python benchmarks/cape_keys.py                      # S = 3, 10, 30 sites, a capeFM-sized round (d = 10)
    python benchmarks/cape_keys.py --sites 3,100 --length 10000 --out cape_keys.json

Each repetition runs one whole CAPE round (key, keys, masked, sum, release) for S sites through
vfl.protocols.cape_aggregation.drive: the baseline with plain CapeSiteRound sessions, the signed run with every
session behind its SignedCapeSite (one Ed25519 signature per site, S - 1 verifications per site before masking).
It prints the best wall time of each and their ratio per S, and writes them as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

from vfl.protocols.cape_aggregation import CapeAggregatorRound, CapeBlock, CapeSiteRound, drive
from vfl.protocols.cape_keys import CapeKeyBook, SignedCapeSite
from vfl.secure.identity import PinnedKeys, SigningIdentity

RUN = "00" * 16


def _round(S: int, length: int, signed: bool) -> Callable[[], None]:
    names = [f"site{i}" for i in range(S)]
    ids = {n: SigningIdentity.generate(n) for n in names}
    pinned = PinnedKeys({n: i.key.verify_key for n, i in ids.items()})
    blocks = [CapeBlock("v", np.zeros(length), tau=1.0)]

    def run() -> None:
        sessions = [CapeSiteRound(i, S, 5, blocks) for i in range(S)]
        sites: list = sessions
        if signed:
            sites = [SignedCapeSite(s, CapeKeyBook(name=names[i], run=RUN, plan_body={"index": i, "sites": names},
                                                   identity=ids[names[i]], pinned=pinned))
                     for i, s in enumerate(sessions)]
        first = [m for s in sites for m in (s.seal_all(s.session.start()) if signed else s.start())]
        drive(CapeAggregatorRound(S, [("v", (length,))], 5), sites, first)

    return run


def _best(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sites", default="3,10,30", help="comma-separated site counts S (default 3,10,30)")
    p.add_argument("--length", type=int, default=110, help="words per site (default 110: capeFM alpha + M, d = 10)")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions, best reported (default 3)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()
    rows = []
    print(f"{'S':>4} {'unsigned s':>11} {'signed s':>10} {'ratio':>7}")
    for S in (int(v) for v in args.sites.split(",")):
        base = _best(_round(S, args.length, False), args.repeats)
        signed = _best(_round(S, args.length, True), args.repeats)
        rows.append({"sites": S, "length": args.length, "unsigned_seconds": base, "signed_seconds": signed,
                     "ratio": signed / base})
        print(f"{S:>4} {base:>11.4f} {signed:>10.4f} {signed / base:>7.3f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"repeats": args.repeats, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
