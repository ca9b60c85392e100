"""Benchmark: wall and CPU of one streamed secure product on 1 and on 2 workers (issue 25, "parallelism that pays").

Usage::

    nice -n 10 python benchmarks/parallel_scaling.py --out docs/data/parallel_scaling.json    # ~3 min idle
    nice -n 10 python benchmarks/parallel_scaling.py --quick                                # ~30 s
    nice -n 10 python benchmarks/parallel_scaling.py --dask --out docs/data/parallel_scaling.json   # + Dask, ~5 min

Both roles run in this process through the wire format of the streamed protocol (stream header, chunks parsed
and validated by the responder, masked response, decryption), exactly as two parties run it, with ``workers=1``
(everything in the calling thread) and ``workers=2`` (each role's local process pool). Shapes: the forest-fires
shape 517 x 13 x 14 and 10^5 x 10 x 10 (``--quick``: 2 x 10^4 x 10 x 10), uniform data in [-1, 1], 2048-bit
keys, p = 24. For each run: wall seconds, CPU seconds (``getrusage`` of this process and its reaped pool
workers), the parent's wall seconds per phase (encrypting, folding, finishing the response, decrypting), and an
exact check against numpy's integer product. Prints the speed-up ``wall(1 worker) / wall(2 workers)`` per shape
(median of ``--repeats``) and the 1-minute load average at the start and end (``os.getloadavg``): on a shared
machine the speed-up is a lower bound of what two idle cores give.

``--dask``: the same products with ``executor="tcp://127.0.0.1:PORT"`` on a real Dask cluster started from the
command line (``dask scheduler``, then ``dask worker tcp://127.0.0.1:PORT --nthreads 1 --no-nanny``, one or two
worker processes: :class:`DaskProcesses`), checked exact against numpy as above; on the same cluster, in the same
run, also through ``client.get_executor()`` (pure tasks of one chunk each: how Dask ran before issue 34) against the
address (each worker keeps its buckets across chunks, :class:`vfl.secure.dask_pool.DaskPinnedPool`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from vfl.secure import ProductEncryptor, ProductResponder, generate_keypair, native
from vfl.secure.encoding import DEFAULT_PRECISION_BITS, to_fixed_point_ints
from vfl.secure.executors import PinnedPool, open_executor
from vfl.secure.products import EncryptedChunk, MaskedResponse, ProductStreamHeader, combine_packed_shares

P = DEFAULT_PRECISION_BITS
ROOT = Path(__file__).resolve().parents[1]
FULL_SHAPES = [("forest 517 x 13 x 14", 517, 13, 14), ("10^5 x 10 x 10", 100_000, 10, 10)]
QUICK_SHAPES = [("forest 517 x 13 x 14", 517, 13, 14), ("2 x 10^4 x 10 x 10", 20_000, 10, 10)]


def processes_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU so far of running processes (``/proc/PID/stat``, fields 14 and 15)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


class DaskProcesses:
    """A Dask scheduler and ``workers`` single-threaded worker processes started from the command line on loopback
    (``dask scheduler --host 127.0.0.1 --port PORT``, ``dask worker tcp://127.0.0.1:PORT --nthreads 1
    --no-nanny``), with this checkout first on their ``PYTHONPATH``; all stopped by process id on exit."""

    def __init__(self, workers: int, start_timeout: float = 180.0) -> None:
        self.workers = workers
        self.start_timeout = start_timeout
        self.procs: list[subprocess.Popen] = []
        self.address = ""

    def __enter__(self) -> DaskProcesses:
        from dask.distributed import Client

        dask = Path(sys.executable).with_name("dask")
        if not dask.exists():
            raise RuntimeError(f"the dask command is not next to {sys.executable}: pip install 'vfl[dask]'")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self._logs = tempfile.TemporaryDirectory(prefix="vfl-dask-")
        commands = [[str(dask), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]]
        commands += [[str(dask), "worker", self.address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                      "--host", "127.0.0.1"] for _ in range(self.workers)]
        try:
            for i, command in enumerate(commands):
                log = open(Path(self._logs.name) / f"{i}.log", "wb")   # noqa: SIM115 - closed with the process
                self.procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
                log.close()
            with Client(self.address, timeout=self.start_timeout) as client:
                client.wait_for_workers(self.workers, timeout=self.start_timeout)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def workers_cpu_seconds(self) -> float:
        """User + system CPU of the worker processes so far (they are not reaped per run)."""
        return processes_cpu_seconds([proc.pid for proc in self.procs[1:]])

    def logs(self) -> str:
        """The processes' output so far (for a failing test's message)."""
        return "\n".join(p.read_text(errors="replace") for p in sorted(Path(self._logs.name).glob("*.log")))

    def __exit__(self, *exc: Any) -> None:
        for proc in reversed(self.procs):   # workers first, then the scheduler
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=60)
        self._logs.cleanup()


def cpu_seconds() -> tuple[float, float]:
    """User + system CPU of this process and of its reaped children (pool workers end with each run)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def streamed_product(A: np.ndarray, B: np.ndarray, keypair: tuple, workers: int,
                     executor: Any = None) -> dict[str, Any]:
    """One product through the wire format; wall, CPU, per-phase parent wall seconds and the exact check."""
    pk, sk = keypair
    phases = dict.fromkeys(("encrypt", "fold", "finish", "decrypt"), 0.0)
    (own0, kids0), t0 = cpu_seconds(), time.perf_counter()
    holder = ProductEncryptor(sk, A, response_cols=B.shape[1], precision_bits=P, workers=workers, executor=executor)
    responder = ProductResponder(B, precision_bits=P, workers=workers, executor=executor)
    header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
    fold = responder.open(header)
    chunks = holder.encrypted_chunks()
    while True:
        t = time.perf_counter()
        chunk = next(chunks, None)
        phases["encrypt"] += time.perf_counter() - t
        if chunk is None:
            break
        t = time.perf_counter()
        fold.add(EncryptedChunk.from_wire(*chunk.to_wire(), header))
        phases["fold"] += time.perf_counter() - t
    t = time.perf_counter()
    response, share_b = fold.finish()
    phases["finish"] += time.perf_counter() - t
    t = time.perf_counter()
    share_a = holder.decrypt(MaskedResponse.from_wire(*response.to_wire(), pk))
    phases["decrypt"] += time.perf_counter() - t
    wall = time.perf_counter() - t0
    own, kids = cpu_seconds()
    own, kids = own - own0, kids - kids0
    total = combine_packed_shares(share_a, share_b, layout=header.layout, n_cols=header.n_cols, modulus=int(pk.n))
    exact = to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0))
    # on two idle cores the run takes at least the parent's own CPU and at least half of all CPU: the wall time an
    # idle machine would give if the workers' share were perfectly balanced (a bound, not a measurement)
    return {"wall_s": wall, "cpu_s": own + kids, "parent_cpu_s": own, "workers_cpu_s": kids,
            "idle_wall_bound_s": max(own, (own + kids) / 2) if kids else own + kids, "phases_s": phases,
            "exact": total.tolist() == exact.tolist(),
            "workers": responder.stats.get("workers", workers)}


def dask_run(A: np.ndarray, B: np.ndarray, keypair: tuple, workers: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One product on a command-line Dask cluster of ``workers`` worker processes (a warm-up product first), with
    buckets kept in the workers (the address) and, on the same cluster, with per-chunk tasks
    (``client.get_executor()``)."""
    from dask.distributed import Client

    def timed(executor: Any) -> dict[str, Any]:
        before = cluster.workers_cpu_seconds()
        out = streamed_product(A, B, keypair, workers, executor)
        kids = cluster.workers_cpu_seconds() - before
        own = out["parent_cpu_s"]
        out.update(workers_cpu_s=kids, cpu_s=own + kids, idle_wall_bound_s=max(own, (own + kids) / workers))
        return out

    with DaskProcesses(workers) as cluster, Client(cluster.address, timeout=120) as client:
        streamed_product(A[:50], B[:50], keypair, 1, cluster.address)   # workers import vfl
        kept = timed(cluster.address)
        per_chunk = timed(client.get_executor(pure=False))
    return kept, per_chunk


def warm_pool_run(A: np.ndarray, B: np.ndarray, keypair: tuple) -> dict[str, Any]:
    """One product on a local pool of 2 workers opened beforehand and shared by both roles, as a CLI party keeps
    one pool for its whole run (a warm-up product first); CPU of its processes from /proc."""
    with open_executor(None, 2) as pool:
        assert isinstance(pool, PinnedPool)
        streamed_product(A[:300], B[:300], keypair, 2, pool)   # workers forked, tables built
        pids = [pid for p in pool.pools for pid in getattr(p, "_processes", {})]
        before = processes_cpu_seconds(pids)
        out = streamed_product(A, B, keypair, 2, pool)
        kids = processes_cpu_seconds(pids) - before
    own = out["parent_cpu_s"]
    out.update(workers_cpu_s=kids, cpu_s=own + kids, idle_wall_bound_s=max(own, (own + kids) / 2))
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run's wall time and phases, the medians of the CPU columns, and whether every run was exact."""
    med = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    return {"wall_s": med["wall_s"], "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "parent_cpu_s": statistics.median(r["parent_cpu_s"] for r in runs),
            "workers_cpu_s": statistics.median(r["workers_cpu_s"] for r in runs),
            "idle_wall_bound_s": statistics.median(r["idle_wall_bound_s"] for r in runs),
            "walls_s": [r["wall_s"] for r in runs], "phases_s": med["phases_s"],
            "exact": all(r["exact"] for r in runs)}


def measure(shapes: list[tuple[str, int, int, int]], keypair: tuple, repeats: int, worker_counts: list[int],
            dask: bool = False) -> list[dict[str, Any]]:
    out, kind = [], "Dask" if dask else "local"
    for name, n, d_a, d_b in shapes:
        rng = np.random.default_rng(n)
        A, B = rng.uniform(-1, 1, (n, d_a)), rng.uniform(-1, 1, (n, d_b))
        row: dict[str, Any] = {"shape": name, "n": n, "d_a": d_a, "d_b": d_b}
        for workers in worker_counts:
            if dask:
                pairs = [dask_run(A, B, keypair, workers) for _ in range(repeats)]
                variants = {"": [kept for kept, _ in pairs], "_per_chunk": [chunked for _, chunked in pairs]}
            else:
                variants = {"": [streamed_product(A, B, keypair, workers) for _ in range(repeats)]}
            for suffix, runs in variants.items():
                row[f"workers_{workers}{suffix}"] = got = summary(runs)
                print(f"{name}: {workers} {kind} worker(s){' (per-chunk tasks)' if suffix else ''}: wall "
                      f"{got['wall_s']:.2f} s, CPU {got['cpu_s']:.2f} s (parent {got['parent_cpu_s']:.2f}, workers "
                      f"{got['workers_cpu_s']:.2f}), parent wall per phase "
                      + ", ".join(f"{k} {v:.2f}" for k, v in got["phases_s"].items()) + f", exact {got['exact']}",
                      flush=True)
            if dask:
                row[f"workers_{workers}_cpu_kept_over_per_chunk"] = (row[f"workers_{workers}"]["cpu_s"]
                                                                    / row[f"workers_{workers}_per_chunk"]["cpu_s"])
        if not dask:
            runs = [warm_pool_run(A, B, keypair) for _ in range(repeats)]
            med = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
            row["workers_2_warm"] = {key: statistics.median(r[key] for r in runs) for key in
                                     ("cpu_s", "parent_cpu_s", "workers_cpu_s", "idle_wall_bound_s")}
            row["workers_2_warm"].update(wall_s=med["wall_s"], walls_s=[r["wall_s"] for r in runs],
                                         phases_s=med["phases_s"], exact=all(r["exact"] for r in runs))
            got = row["workers_2_warm"]
            print(f"{name}: 2 local workers, one warm pool for both roles: wall {got['wall_s']:.2f} s, CPU "
                  f"{got['cpu_s']:.2f} s (parent {got['parent_cpu_s']:.2f}, workers {got['workers_cpu_s']:.2f}), "
                  f"exact {got['exact']}", flush=True)
        if 1 in worker_counts and 2 in worker_counts:
            one, two = row["workers_1"], row["workers_2"]
            row["speedup_2_over_1"] = one["wall_s"] / two["wall_s"]
            row["cpu_ratio_2_over_1"] = two["cpu_s"] / one["cpu_s"]
            row["idle_speedup_bound"] = one["cpu_s"] / two["idle_wall_bound_s"]
            if "workers_2_warm" in row:
                warm = row["workers_2_warm"]
                row["warm_speedup_2_over_1"] = one["wall_s"] / warm["wall_s"]
                row["warm_cpu_ratio_2_over_1"] = warm["cpu_s"] / one["cpu_s"]
                row["warm_idle_speedup_bound"] = one["cpu_s"] / warm["idle_wall_bound_s"]
            print(f"{name}: {kind}: wall speed-up 2 workers over 1 = {row['speedup_2_over_1']:.2f}x; CPU 2 / 1 = "
                  f"{row['cpu_ratio_2_over_1']:.2f}; bound on two idle cores (1-worker CPU / max(parent CPU, "
                  f"all CPU / 2)) = {row['idle_speedup_bound']:.2f}x", flush=True)
        out.append(row)
    return out


def markdown(report: dict[str, Any]) -> str:
    """The two tables of docs/secure_products.md, "Parallel workers" (checked against the JSON by
    tests/docs/test_docs_parallel.py)."""
    lines = ["| machine | |", "|---|---:|",
             f"| 1-minute load at the start / end of the run | {report['load_1min_start']:.2f} / "
             f"{report['load_1min_end']:.2f} |", "",
             "| run | wall (s) | CPU (s) | parent CPU (s) | workers' CPU (s) | exact |",
             "|---|---:|---:|---:|---:|---|"]
    groups = [("local", r) for r in report["shapes"]] + [("Dask", r) for r in report.get("dask_shapes", [])]
    for kind, row in groups:
        for w in ("1", "2", "2_warm", "1_per_chunk", "2_per_chunk"):
            if f"workers_{w}" not in row:
                continue
            got = row[f"workers_{w}"]
            label = {"1": f"1 {kind} worker", "2": f"2 {kind} workers",
                     "2_warm": f"2 {kind} workers, one warm pool",
                     "1_per_chunk": f"1 {kind} worker, per-chunk tasks (before issue 34)",
                     "2_per_chunk": f"2 {kind} workers, per-chunk tasks (before issue 34)"}[w]
            lines.append(f"| {row['shape']}, {label} | {got['wall_s']:.2f} | "
                         f"{got['cpu_s']:.2f} | {got['parent_cpu_s']:.2f} | {got['workers_cpu_s']:.2f} | "
                         f"{'yes' if got['exact'] else 'NO'} |")
    lines += ["", "| 2 workers against 1 | wall speed-up | CPU ratio | bound on two idle cores |",
              "|---|---:|---:|---:|"]
    for kind, row in groups:
        lines.append(f"| {row['shape']}, {kind} | {row['speedup_2_over_1']:.2f} | {row['cpu_ratio_2_over_1']:.2f} | "
                     f"{row['idle_speedup_bound']:.2f} |")
        if "warm_speedup_2_over_1" in row:
            lines.append(f"| {row['shape']}, {kind}, one warm pool | {row['warm_speedup_2_over_1']:.2f} | "
                         f"{row['warm_cpu_ratio_2_over_1']:.2f} | {row['warm_idle_speedup_bound']:.2f} |")
    dask_rows = [row for row in report.get("dask_shapes", []) if "workers_1_per_chunk" in row]
    if dask_rows:
        lines += ["", "| Dask, buckets kept against per-chunk tasks (same run, same cluster) | CPU kept (s) | "
                  "CPU per-chunk (s) | CPU ratio |", "|---|---:|---:|---:|"]
        for row in dask_rows:
            for w in ("1", "2"):
                lines.append(f"| {row['shape']}, {w} Dask worker{'s' if w == '2' else ''} | "
                             f"{row[f'workers_{w}']['cpu_s']:.2f} | {row[f'workers_{w}_per_chunk']['cpu_s']:.2f} | "
                             f"{row[f'workers_{w}_cpu_kept_over_per_chunk']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 x 10^4 rows instead of 10^5")
    parser.add_argument("--repeats", type=int, default=3, help="runs per shape and worker count (median)")
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument("--dask", action="store_true", help="also 1 and 2 command-line Dask worker processes")
    parser.add_argument("--dask-repeats", type=int, default=1,
                        help="Dask clusters per shape and worker count (median; each runs both Dask variants)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    load0 = os.getloadavg()[0]
    keypair = generate_keypair(args.key_bits, allow_insecure=args.key_bits < 2048)
    t0 = time.perf_counter()
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    rows = measure(shapes, keypair, args.repeats, [1, 2])
    dask_rows = measure(shapes, keypair, args.dask_repeats, [1, 2], dask=True) if args.dask else []
    report = {
        "command": "python benchmarks/parallel_scaling.py" + (" --quick" if args.quick else "")
                   + (" --dask" if args.dask else "") + f" --repeats {args.repeats}"
                   + (f" --dask-repeats {args.dask_repeats}" if args.dask and args.dask_repeats != 1 else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_count": os.cpu_count(), "key_bits": args.key_bits, "precision_bits": P, "loops": native.IMPLEMENTATION,
        "load_1min_start": load0, "load_1min_end": os.getloadavg()[0],
        "seconds": time.perf_counter() - t0, "shapes": rows, "dask_shapes": dask_rows,
    }
    print(f"inner loops: {report['loops']}")
    print(f"1-minute load average: {report['load_1min_start']:.2f} at the start, {report['load_1min_end']:.2f} at "
          f"the end; {report['seconds']:.0f} s in all")
    print(markdown(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    exact = all(r[key]["exact"] for r in rows + dask_rows for key in r
                if key.startswith("workers_") and isinstance(r[key], dict))
    return 0 if exact and all(r["workers_2_warm"]["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
