"""Networked capePCA + capeDJICA vs the same pipeline in process (issue 11): wall time side by side, equality.

    python benchmarks/djica_network.py                       # S=4 sites, D=20, K=5, 2000 time points, J=50
    python benchmarks/djica_network.py --rounds 200 --sites 8

Both runs use the same seed: the networked model (vfl.fit_ica_sites: an aggregator and one SiteNode thread per
site over loopback ZeroMQ, two CAPE secure aggregations, J state/release rounds) must equal the in-process
fit_cape_ica bit for bit; the script prints both wall times, their ratio and the per-round network cost.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import vfl
from vfl.data.synthetic_ica import make_joint_ica
from vfl.models.cape_ica import CapeICAConfig, fit_cape_ica


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sites", type=int, default=4, help="sites S (default 4)")
    p.add_argument("--subjects", type=int, default=2, help="subjects per site (default 2)")
    p.add_argument("--time-points", type=int, default=250, help="time points per subject (default 250)")
    p.add_argument("--dims", type=int, default=20, help="data dimension D (default 20)")
    p.add_argument("--components", type=int, default=5, help="components K (default 5)")
    p.add_argument("--rounds", type=int, default=50, help="capeDJICA rounds J (default 50)")
    p.add_argument("--epsilon", type=float, default=2.0, help="per-site epsilon of the pipeline (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions, best reported (default 3)")
    p.add_argument("--seed", type=int, default=11, help="seed of data and noise (default 11)")
    args = p.parse_args()
    data = make_joint_ica(args.sites, args.subjects, args.time_points, args.components, args.dims, scale_sd=2.0,
                          random_state=args.seed)
    names = [f"site{i:02d}" for i in range(args.sites)]
    config = CapeICAConfig(args.components, args.epsilon, max_iter=args.rounds, tol=1e-300)  # all J rounds run
    t_local, t_net = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ref = fit_cape_ica(data.sites, config, random_state=args.seed)
        t_local.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        model = vfl.fit_ica_sites(dict(zip(names, data.sites, strict=True)), args.components, args.epsilon,
                                  max_iter=args.rounds, tol=1e-300, random_state=args.seed)
        t_net.append(time.perf_counter() - t0)
    equal = np.array_equal(model.unmixing, ref.ica.unmixing_) and np.array_equal(model.whitening, ref.whitening)
    n = sum(X.shape[1] for X in data.sites)
    print(f"S={args.sites} D={args.dims} K={args.components} N={n} J={args.rounds} rounds run={model.n_rounds}")
    print(f"in process (fit_cape_ica):        {min(t_local):8.3f} s (best of {args.repeats})")
    print(f"networked (loopback ZeroMQ):      {min(t_net):8.3f} s (best of {args.repeats})")
    print(f"ratio networked / in process:     {min(t_net) / min(t_local):8.2f}x")
    print(f"network overhead per round:       {(min(t_net) - min(t_local)) / model.n_rounds * 1e3:8.2f} ms")
    print(f"networked model equals in-process bit for bit: {equal}")
    if not equal:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
