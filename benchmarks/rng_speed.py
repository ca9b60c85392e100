"""Speed cost of cryptographically secure noise: ChaCha20 (vfl.rng default) vs seeded PCG64, side by side.

Times the float draws the centralized mechanisms make (normal, laplace) and the integer draws of the
exact discrete Gaussian sampler (vfl.secure.discrete_noise), and a whole gaussian-fm fit, printing
the ChaCha20 / PCG64 ratio (median of alternating runs).
Run:  nice -n 10 python benchmarks/rng_speed.py [--size 2000000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vfl.rng import make_rng, secure_generator
from vfl.secure.discrete_noise import discrete_gaussian_array


def side_by_side(fn_a, fn_b, repeats: int) -> tuple[float, float]:
    """Median times of two functions run alternately (a shared machine's load hits both alike)."""
    times_a, times_b = [], []
    for _ in range(repeats):
        for fn, times in ((fn_a, times_a), (fn_b, times_b)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return float(np.median(times_a)), float(np.median(times_b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2_000_000, help="float draws per timing")
    ap.add_argument("--discrete", type=int, default=400, help="discrete Gaussian draws per timing")
    ap.add_argument("--repeats", type=int, default=9, help="alternating repetitions per row (median reported)")
    args = ap.parse_args()
    rows = [("create one generator (x1000)",
             *side_by_side(lambda: [make_rng(0) for _ in range(1000)], lambda: [secure_generator() for _ in
                                                                                range(1000)], args.repeats))]
    for label, draw in [
        ("normal", lambda g: g.normal(size=args.size)),
        ("laplace", lambda g: g.laplace(size=args.size)),
        ("integers 62-bit", lambda g: g.integers(0, 2**62, size=args.size)),
        ("discrete gaussian (sigma 2^40)", lambda g: discrete_gaussian_array(2.0**40, (args.discrete,), g)),
    ]:
        rows.append((label, *side_by_side(lambda draw=draw: draw(make_rng(0)),
                                          lambda draw=draw: draw(secure_generator()), args.repeats)))

    import vfl

    rng = np.random.default_rng(1)
    X, y = rng.uniform(-1, 1, (20_000, 20)), rng.uniform(-1, 1, 20_000)
    kw = {"mechanism": "gaussian-fm", "bounds": (-1.0, 1.0), "y_bounds": (-1.0, 1.0)}
    rows.append(("LinearRegression gaussian-fm fit (N=2e4, d=20)",
                 *side_by_side(lambda: vfl.LinearRegression(**kw, random_state=0).fit(X, y),
                               lambda: vfl.LinearRegression(**kw).fit(X, y), args.repeats)))
    print(f"{'draw':48s} {'PCG64 s':>10s} {'ChaCha20 s':>11s} {'ratio':>7s}")
    for label, a, b in rows:
        print(f"{label:48s} {a:10.4f} {b:11.4f} {b / a:7.2f}")


if __name__ == "__main__":
    main()
