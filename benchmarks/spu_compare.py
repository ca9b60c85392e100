"""vfl against SecretFlow's SPU 0.9.5 on this machine: PSI and the cross products of a vertical linear fit (issue 34).

    # in a throwaway venv, never a dependency of vfl:  python3 -m venv /work/spu-venv
    #   /work/spu-venv/bin/pip install spu==0.9.5 && /work/spu-venv/bin/pip install -e .
    nice -n 10 /work/spu-venv/bin/python benchmarks/spu_compare.py --psi 10000,100000 --products 10000,100000 \\
        --repeats 2 --json docs/data/spu_compare.json          # root: runs in its own network namespace
    python benchmarks/spu_compare.py --markdown docs/data/spu_compare.json   # the docs' tables (no spu needed)

**PSI** (every party n random 16-hex-digit IDs, half of them common, each list shuffled): vfl's
:func:`vfl.protocols.alignment.align_in_process` (benchmarks/psi.py's path: every party's and the coordinator's
state machine in one process, ECDH on Curve25519 on a thread pool of the usable cores, afterwards every party knows
its common rows in the agreed order; ``--baseline REF`` also runs it as it is at git REF, e.g. the P-256 ring)
against SPU's ``psi_execute`` between two processes on a loopback brpc link: ECDH on Curve25519, KKRT16 and RR22
(``broadcast_result=True`` so both parties learn the intersection, CSV in, CSV out as SPU's API requires). CPU is
the sum over SPU's two processes (all their threads, ``time.process_time`` in each); every run's intersection is
checked equal to the true one, ID for ID.

**Cross products** ``X_A^T X_B`` (n x 10 by n x 10, uniform on [-1, 1] as vfl's fits scale features): vfl's
streamed Paillier product as two parties run it (benchmarks/secure_products.py's ``vfl_cpu_run``: 2048-bit key,
one worker each, through the wire forms; its payload bytes are the wire frames and JSON headers), exact against
numpy's integer product of the fixed-point encodings; against SPU CHEETAH (2PC, semi-honest, FM64, SPU's default
fractional bits) between two processes on a loopback brpc link: each owner secret-shares its matrix to the other
(``Io.make_shares``, sent over the link), both run the compiled ``X_A.T @ X_B``, the output shares are exchanged
and opened. SPU's bytes are the kernel's: this process enters a fresh network namespace
(``unshare(CLONE_NEWNET)``, so root) and reads ``lo``'s transmitted bytes (/proc/net/dev) before and after each
run (payload plus TCP/IP headers, both directions, nothing else on that ``lo``).

Repetitions alternate (vfl, SPU, vfl, SPU ...) on the same data; the 1-minute load average is recorded before and
after each run (the machine is shared: CPU time is the primary measure, wall is indicative).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import datetime
import json
import multiprocessing as mp
import os
import secrets
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # this tree's vfl (the spu venv may hold another tree's editable install)
PROTOCOLS = ("ECDH-25519", "ECDH-25519-ELL2", "KKRT16", "RR22")
COLS = 10


def require_spu() -> None:
    try:
        import spu  # noqa: F401
    except ImportError:
        raise SystemExit("spu_compare: `spu` is not importable (install spu==0.9.5 in a throwaway venv, never "
                         "into vfl's; see this file's docstring)") from None


# ---------------------------------------------------------------- network namespace, load, ports

def private_network() -> None:
    """Enter a fresh network namespace with only ``lo`` (so its counters are this benchmark's traffic alone)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:   # CLONE_NEWNET
        raise SystemExit(f"spu_compare: unshare(CLONE_NEWNET) failed ({os.strerror(ctypes.get_errno())}); run as root")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def lo_tx_bytes() -> int:
    """``lo``'s transmitted bytes in THIS process's network namespace (/proc/net/dev follows the reader's
    namespace; /sys/class/net follows sysfs's mount, the host's, and would count other sessions' traffic)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, fields = line.partition(":")
        if name.strip() == "lo":
            return int(fields.split()[8])
    raise SystemExit("spu_compare: no lo in /proc/net/dev")


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def free_ports(k: int) -> list[int]:
    socks = [socket.socket() for _ in range(k)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def make_link(rank: int, ports: list[int] | list[str]) -> Any:
    """A brpc link; ``ports`` are loopback ports or full ``host:port`` addresses as this rank sees them."""
    import spu.libspu as libspu

    desc = libspu.link.Desc()
    desc.recv_timeout_ms = 3_600_000
    desc.http_max_payload_size = 64 << 20
    desc.connect_retry_times = 600
    for r, port in enumerate(ports):
        desc.add_party(f"p{r}", port if isinstance(port, str) else f"127.0.0.1:{port}")
    return libspu.link.create_brpc(desc, rank)


def run_pair(target: Any, args: list[tuple]) -> list[dict]:
    """Run ``target(rank, queue, *args[rank])`` in two spawned processes; their reports, by rank."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(rank, queue, *a)) for rank, a in enumerate(args)]
    for p in procs:
        p.start()
    reports = [queue.get(timeout=7200) for _ in procs]
    for p in procs:
        p.join(timeout=600)
        if p.exitcode != 0:
            raise SystemExit(f"spu_compare: an SPU party exited with {p.exitcode}")
    return sorted(reports, key=lambda r: r["rank"])


# ---------------------------------------------------------------- PSI

def make_ids(n: int) -> tuple[list[str], list[str], set[str]]:
    shared = [secrets.token_hex(8) for _ in range(n // 2)]
    lists = []
    for _ in range(2):
        own = shared + [secrets.token_hex(8) for _ in range(n - len(shared))]
        secrets.SystemRandom().shuffle(own)
        lists.append(own)
    return lists[0], lists[1], set(shared)


def spu_psi_party(rank: int, queue: Any, ports: list[int], protocol: str, inp: str, out: str) -> None:
    import spu.psi as psi

    kinds = {"ECDH-25519": psi.PsiProtocol.PROTOCOL_ECDH, "ECDH-25519-ELL2": psi.PsiProtocol.PROTOCOL_ECDH,
             "KKRT16": psi.PsiProtocol.PROTOCOL_KKRT, "RR22": psi.PsiProtocol.PROTOCOL_RR22}
    # ECDH-25519 hashes an ID with SHA-256 straight to an X25519 u-coordinate (curve or twist);
    # ECDH-25519-ELL2 hashes into the prime-order subgroup with Elligator 2, as vfl does.
    curve = (psi.EllipticCurveType.CURVE_25519_ELLIGATOR2 if protocol == "ECDH-25519-ELL2"
             else psi.EllipticCurveType.CURVE_25519)
    link = make_link(rank, ports)
    link.barrier()
    wall, cpu = time.perf_counter(), time.process_time()
    config = psi.PsiExecuteConfig(
        protocol_conf=psi.PsiProtocolConfig(
            protocol=kinds[protocol], receiver_rank=0, broadcast_result=True,
            ecdh_params=psi.EcdhParams(curve=curve)),
        input_params=psi.InputParams(path=inp, selected_keys=["id"], keys_unique=True),
        output_params=psi.OutputParams(path=out, disable_alignment=False))
    report = psi.psi_execute(config, link)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    link.barrier()
    link.stop_link()
    queue.put({"rank": rank, "cpu_s": cpu, "wall_s": wall, "count": report.intersection_count})


def spu_psi(ids: tuple[list[str], list[str]], truth: set[str], protocol: str, tmp: Path) -> dict:
    paths = []
    for rank, own in enumerate(ids):
        inp, out = tmp / f"in{rank}.csv", tmp / f"out{rank}.csv"
        inp.write_text("id\n" + "\n".join(own) + "\n")
        paths.append((str(inp), str(out)))
    before = lo_tx_bytes()
    reps = run_pair(spu_psi_party, _psi_args(protocol, paths))
    sent = lo_tx_bytes() - before
    exact = True
    for _, written in paths:
        with open(written, newline="") as f:
            got = [row["id"] for row in csv.DictReader(f)]
        exact &= len(got) == len(truth) and set(got) == truth
    return {"cpu_s": sum(r["cpu_s"] for r in reps), "wall_s": max(r["wall_s"] for r in reps),
            "cpu_s_per_party": [r["cpu_s"] for r in reps], "bytes": sent, "common": reps[0]["count"],
            "exact": bool(exact)}


def _psi_args(protocol: str, paths: list[tuple[str, str]]) -> list[tuple]:
    ports = free_ports(2)
    return [(ports, protocol, inp, out) for inp, out in paths]


def vfl_psi(ids: tuple[list[str], list[str]], truth: set[str]) -> dict:
    from vfl.protocols.alignment import align_in_process

    wall, cpu = time.perf_counter(), time.process_time()
    rows = align_in_process(list(ids))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    common = {ids[0][i] for i in rows[0]}
    same_order = [ids[0][i] for i in rows[0]] == [ids[1][j] for j in rows[1]]
    return {"cpu_s": cpu, "wall_s": wall, "common": len(rows[0]), "exact": common == truth and same_order}


_BASELINE_RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from vfl.protocols.alignment import align_in_process
ids = json.loads(open(sys.argv[2]).read())
wall, cpu = time.perf_counter(), time.process_time()
rows = align_in_process(ids)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "rows": [r.tolist() for r in rows]}))
"""


def baseline_tree(ref: str, into: Path) -> Path:
    """vfl's package as it is at git ``ref`` (``git archive``), to run its alignment beside this tree's."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref, "vfl"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def vfl_psi_baseline(ids: tuple[list[str], list[str]], truth: set[str], tree: Path, tmp: Path) -> dict:
    """:func:`vfl_psi` on the baseline tree's code, in a fresh interpreter (timed inside it, imports excluded)."""
    (tmp / "ids.json").write_text(json.dumps(list(ids)))
    proc = subprocess.run([sys.executable, "-c", _BASELINE_RUN, str(tree), str(tmp / "ids.json")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"spu_compare: the baseline alignment failed: {proc.stderr.strip().splitlines()[-1:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = got.pop("rows")
    common = {ids[0][i] for i in rows[0]}
    same_order = [ids[0][i] for i in rows[0]] == [ids[1][j] for j in rows[1]]
    return {**got, "common": len(rows[0]), "exact": common == truth and same_order}


def psi_runs(sizes: list[int], repeats: int, protocols: list[str], out: list[dict], save: Any,
             baseline: tuple[str, Path] | None = None) -> None:
    """Every size: vfl (this tree), the baseline tree's vfl if given (named ``vfl@REF``), then SPU's protocols,
    alternating, on the same IDs."""
    for n in sizes:
        ids0, ids1, truth = make_ids(n)
        others = ([f"vfl@{baseline[0]}"] if baseline else []) + protocols
        runs: dict[str, list[dict]] = {"vfl": [], **{p: [] for p in others}}
        for rep in range(repeats):
            for who in ["vfl", *others]:
                l0 = load1()
                with tempfile.TemporaryDirectory() as tmp:
                    if who == "vfl":
                        r = vfl_psi((ids0, ids1), truth)
                    elif who.startswith("vfl@"):
                        assert baseline is not None
                        r = vfl_psi_baseline((ids0, ids1), truth, baseline[1], Path(tmp))
                    else:
                        r = spu_psi((ids0, ids1), truth, who, Path(tmp))
                r["load"] = [l0, load1()]
                if not r["exact"]:
                    raise SystemExit(f"spu_compare: {who} PSI at n={n} did not return the exact intersection")
                runs[who].append(r)
                print(f"psi n={n:>8d} rep {rep} {who:>10s}: CPU {r['cpu_s']:7.2f} s  wall {r['wall_s']:7.2f} s  "
                      f"common {r['common']}  load {r['load']}", flush=True)
        out.append({"ids_per_party": n, "common": len(truth), "runs": runs})
        save()


# ---------------------------------------------------------------- cross products

def make_matrices(n: int, seed: int) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)   # features scaled to [-1, 1], as vfl's fits require
    return rng.uniform(-1, 1, (n, COLS)), rng.uniform(-1, 1, (n, COLS))


def _send_share(link: Any, dst: int, share: Any) -> None:
    link.send(dst, json.dumps([share.meta.hex(), [c.hex() for c in share.share_chunks]]))


def _recv_share(link: Any, src: int) -> Any:
    import spu.libspu as libspu

    meta, chunks = json.loads(link.recv(src))
    share = libspu.Share()
    share.meta = bytes.fromhex(meta)
    share.share_chunks = [bytes.fromhex(c) for c in chunks]
    return share


def cheetah_party(rank: int, queue: Any, ports: list[int] | list[str], n: int, seed: int) -> None:
    import jax.numpy as jnp
    import numpy as np
    import spu.libspu as libspu
    import spu.utils.frontend as fe
    from spu import api

    X = make_matrices(n, seed)[rank]
    config = libspu.RuntimeConfig(protocol=libspu.ProtocolKind.CHEETAH, field=libspu.FieldType.FM64)
    executable, _ = fe.compile(fe.Kind.JAX, lambda a, b: jnp.matmul(a.T, b), (X, X), {}, ["xa", "xb"],
                               [libspu.Visibility.VIS_SECRET] * 2, lambda out: ["prod"])
    link = make_link(rank, ports)
    rt = api.Runtime(link, config)
    io = api.Io(2, config)
    link.barrier()
    wall, cpu = time.perf_counter(), time.process_time()
    shares = io.make_shares(X, libspu.Visibility.VIS_SECRET)
    other = 1 - rank
    if rank == 0:
        _send_share(link, other, shares[other])
        theirs = _recv_share(link, other)
    else:
        theirs = _recv_share(link, other)
        _send_share(link, other, shares[other])
    mine = {rank: shares[rank], other: theirs}   # rank's share of X_A (owner 0) and of X_B (owner 1)
    rt.set_var("xa", mine[0])
    rt.set_var("xb", mine[1])
    rt.run(executable)
    out = rt.get_var("prod")
    if rank == 0:
        _send_share(link, other, out)
        peer = _recv_share(link, other)
    else:
        peer = _recv_share(link, other)
        _send_share(link, other, out)
    product = io.reconstruct([out, peer] if rank == 0 else [peer, out])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    link.barrier()
    link.stop_link()
    A, B = make_matrices(n, seed)
    err = float(np.max(np.abs(np.asarray(product, dtype=np.float64) - A.T @ B)))
    queue.put({"rank": rank, "cpu_s": cpu, "wall_s": wall, "max_abs_error": err})


def spu_product(n: int, seed: int) -> dict:
    before = lo_tx_bytes()
    ports = free_ports(2)
    reps = run_pair(cheetah_party, [(ports, n, seed), (ports, n, seed)])
    sent = lo_tx_bytes() - before
    return {"cpu_s": sum(r["cpu_s"] for r in reps), "wall_s": max(r["wall_s"] for r in reps),
            "cpu_s_per_party": [r["cpu_s"] for r in reps], "bytes": sent,
            "max_abs_error": max(r["max_abs_error"] for r in reps)}


_WIRE_BYTES: dict[int, int] = {}


def vfl_product(n: int, seed: int, keypair: tuple) -> dict:
    from secure_products import P, vfl_cpu_run

    A, B = make_matrices(n, seed)
    wall = time.perf_counter()
    run = vfl_cpu_run(A, B, keypair)
    wall = time.perf_counter() - wall
    if n not in _WIRE_BYTES:   # the same for every repetition of a shape: counted once, untimed
        _WIRE_BYTES[n] = wire_bytes(A, B, keypair)
    return {"cpu_s": run["cpu_s"], "wall_s": wall, "exact": run["exact"], "bytes": _WIRE_BYTES[n],
            "precision_bits": P, "max_abs_error": fixed_point_error(A, B)}


def fixed_point_error(A: Any, B: Any) -> float:
    """Max abs error of vfl's decoded product against numpy's float one (vfl's integers are exact, checked above,
    so its only error is the fixed-point encoding of the inputs)."""
    import numpy as np
    from secure_products import P

    from vfl.secure.encoding import to_fixed_point_ints

    ints = to_fixed_point_ints(A, P, 1.0).astype(object).T.dot(to_fixed_point_ints(B, P, 1.0).astype(object))
    decoded = np.array([[float(v) / 2.0 ** (2 * P) for v in row] for row in ints])
    return float(np.max(np.abs(decoded - A.T @ B)))


def wire_bytes(A: Any, B: Any, keypair: tuple) -> int:
    """Payload bytes of vfl's product (stream header, encrypted chunks, masked response), one untimed pass."""
    from secure_products import P

    from vfl.secure import MaskedResponse, ProductEncryptor, ProductResponder
    from vfl.secure.products import EncryptedChunk, ProductStreamHeader

    pk, sk = keypair
    holder = ProductEncryptor(sk, A, response_cols=B.shape[1], precision_bits=P, workers=1)
    responder = ProductResponder(B, precision_bits=P, workers=1)
    total = 0

    def size(header: dict, frames: list[bytes]) -> int:
        return len(json.dumps(header, default=str)) + sum(len(f) for f in frames)

    header, frames = holder.stream_header().to_wire()
    total += size(header, frames)
    stream = ProductStreamHeader.from_wire(header, frames, pk)
    fold = responder.open(stream)
    for chunk in holder.encrypted_chunks():
        header, frames = chunk.to_wire()
        total += size(header, frames)
        fold.add(EncryptedChunk.from_wire(header, frames, stream))
    response, _ = fold.finish()
    header, frames = response.to_wire()
    total += size(header, frames)
    holder.decrypt(MaskedResponse.from_wire(header, frames, pk))
    return total


def product_runs(sizes: list[int], repeats: int, out: list[dict], save: Any) -> None:
    from vfl.secure import generate_keypair

    keypair = generate_keypair(2048)
    for n in sizes:
        seed = secrets.randbits(32)
        runs: dict[str, list[dict]] = {"vfl": [], "CHEETAH": []}
        for rep in range(repeats):
            for who in ("vfl", "CHEETAH"):
                l0 = load1()
                r = vfl_product(n, seed, keypair) if who == "vfl" else spu_product(n, seed)
                r["load"] = [l0, load1()]
                if who == "vfl" and not r["exact"]:
                    raise SystemExit(f"spu_compare: vfl's product at n={n} is not exact")
                runs[who].append(r)
                print(f"product n={n:>7d} rep {rep} {who:>8s}: CPU {r['cpu_s']:7.2f} s  wall {r['wall_s']:7.2f} s  "
                      f"bytes {r['bytes']:>12,d}  max abs error {r['max_abs_error']:.1e}  load {r['load']}",
                      flush=True)
        out.append({"rows": n, "cols": COLS, "runs": runs})
        save()


# ---------------------------------------------------------------- over benchmarks/wan.py's shaped links

class _Printer:
    """The queue of a party run by ``--wan-party`` in its own namespace: its report is one stdout line."""

    def put(self, report: dict) -> None:
        print("REPORT " + json.dumps(report), flush=True)


def _wan_hosts(top: Any, rtt: float) -> tuple[dict[int, list[str]], list[list[str]]]:
    """Each rank's view of the two brpc addresses, and the two delay lines in the coordinator's namespace that
    join alice's and bob's links (rank 0 in alice's namespace, rank 1 in bob's; wan.py's addresses)."""
    a_near, a_far = top.address("alice", "party"), top.address("alice", "coordinator")
    b_near, b_far = top.address("bob", "party"), top.address("bob", "coordinator")
    p0, p1 = 7001, 7002
    hosts = {0: [f"{a_near}:{p0}", f"{a_far}:{p1}"], 1: [f"{b_far}:{p0}", f"{b_near}:{p1}"]}
    lines = [["--listen", f"{a_far}:{p1}", "--to", f"{b_near}:{p1}", "--delay-ms", str(rtt / 2)],
             ["--listen", f"{b_far}:{p0}", "--to", f"{a_near}:{p0}", "--delay-ms", str(rtt / 2)]]
    return hosts, lines


def wan_cheetah(n: int, link: str, seed: int) -> dict:
    """CHEETAH's product between alice's and bob's namespaces of wan.py's topology (tbf rate on every veth end,
    the delay line for the RTT): wall, CPU and the kernel's sent bytes per role."""
    import wan

    rate, rtt = wan.LINKS[link]
    top = wan.Topology(f"sp{secrets.token_hex(2)}", rate, rtt, False)
    hosts, line_args = _wan_hosts(top, rtt)
    lines: list[subprocess.Popen] = []
    try:
        top.up()
        for args in line_args:
            line = subprocess.Popen(top.exec("coordinator", [sys.executable, str(ROOT / "benchmarks" / "delay_line.py"),
                                                             *args]), stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            lines.append(line)
            if line.stdout is None or line.stdout.readline().strip() != "delay line ready":
                raise SystemExit("spu_compare: a delay line did not start")
        before = top.tx_bytes()
        procs = [subprocess.Popen(top.exec(role, [sys.executable, __file__, "--wan-party", str(rank), "--hosts",
                                                  ",".join(hosts[rank]), "--products", str(n), "--seed", str(seed)]),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for rank, role in enumerate(wan.PARTIES)]
        reports = []
        for p in procs:
            out, _ = p.communicate(timeout=7200)
            got = [json.loads(x[7:]) for x in out.splitlines() if x.startswith("REPORT ")]
            if p.returncode or not got:
                raise SystemExit(f"spu_compare: a CHEETAH party over {link} failed (exit {p.returncode})")
            reports.append(got[0])
        after = top.tx_bytes()
    finally:
        for line in lines:
            line.terminate()
            line.wait()
        top.down()
    return {"link": link, "rows": n, "wall_s": max(r["wall_s"] for r in reports),
            "cpu_s": {role: r["cpu_s"] for role, r in zip(wan.PARTIES, reports, strict=True)},
            "sent_bytes": {role: after[role] - before[role] for role in after},
            "max_abs_error": max(r["max_abs_error"] for r in reports)}


def wan_runs(sizes: list[int], links: list[str], out: list[dict], save: Any) -> None:
    for n in sizes:
        seed = secrets.randbits(32)
        for link in links:
            l0 = load1()
            r = wan_cheetah(n, link, seed)
            r["load"] = [l0, load1()]
            out.append(r)
            save()
            print(f"wan n={n:>7d} {link:>13s} CHEETAH: wall {r['wall_s']:7.2f} s  CPU {r['cpu_s']}  "
                  f"sent {r['sent_bytes']}  load {r['load']}", flush=True)


def wan_markdown(doc: dict) -> str:
    lines = ["| n | link | load (1 min) | CHEETAH wall (s) | CPU s alice / bob | sent MB alice / bob / relay | "
             "sent bytes per row alice / bob | max abs error |", "|---:|---|---:|---:|---|---|---|---:|"]
    for r in doc.get("wan", []):
        b, n = r["sent_bytes"], r["rows"]
        lines.append(f"| {n:,} | {r['link']} | {min(r['load']):.0f}-{max(r['load']):.0f} | {r['wall_s']:.1f} | "
                     f"{r['cpu_s']['alice']:.1f} / {r['cpu_s']['bob']:.1f} | {b['alice'] / 1e6:.1f} / "
                     f"{b['bob'] / 1e6:.1f} / {b['coordinator'] / 1e6:.1f} | {b['alice'] / n:,.0f} / "
                     f"{b['bob'] / n:,.0f} | {r['max_abs_error']:.1e} |")
    return "\n".join(lines)


def wan_summary(doc: dict, vfl_wan: dict) -> str:
    """Per size and link: CHEETAH's products against vfl's whole fit over the same links (docs/data/wan.json)."""
    vfl = {(r["n"], r["link"]): r for r in vfl_wan["runs"]}
    lines = []
    for r in doc.get("wan", []):
        v = vfl.get((r["rows"], r["link"]))
        if v is None:
            continue
        n, cb, vb = r["rows"], r["sent_bytes"], v["sent_bytes"]
        c_par, v_par = (cb["alice"] + cb["bob"]) / n, (vb["alice"] + vb["bob"]) / n
        lines.append(f"* {n:,} rows, {r['link']}: CHEETAH's cross products alone {r['wall_s']:.1f} s wall, the two "
                     f"parties sending {c_par:,.0f} bytes per row; vfl's whole fit {v['wall_s']:.1f} s wall, its "
                     f"parties sending {v_par:,.0f} bytes per row (CHEETAH {_faster(c_par, v_par, 'fewer')} bytes, "
                     f"{r['wall_s'] / v['wall_s']:.2f} of vfl's wall).")
    return "\n".join(lines)


# ---------------------------------------------------------------- tables (what the docs show; no spu needed)

def med(runs: list[dict], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def psi_markdown(doc: dict) -> str:
    curve = doc.get("vfl_curve", "P-256")
    if "vfl_x25519" in doc:
        curve += ", X25519: " + doc["vfl_x25519"]
    lines = [f"| IDs per party | common | vfl CPU s ({curve}, 1 process, all roles) | peer: SPU protocol or vfl@REF | "
             "peer CPU s | vfl / peer CPU | vfl wall s | peer wall s | load (1 min) |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for size in doc["psi"]:
        v = size["runs"]["vfl"]
        for proto, runs in size["runs"].items():
            if proto == "vfl":
                continue
            loads = [x for r in v + runs for x in r["load"]]
            lines.append(f"| {size['ids_per_party']:,} | {size['common']:,} | {med(v, 'cpu_s'):.2f} | {proto} | "
                         f"{med(runs, 'cpu_s'):.2f} | {med(v, 'cpu_s') / med(runs, 'cpu_s'):.1f} | "
                         f"{med(v, 'wall_s'):.2f} | {med(runs, 'wall_s'):.2f} | "
                         f"{min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines)


def product_markdown(doc: dict) -> str:
    lines = ["| rows x cols x cols | vfl CPU s | CHEETAH CPU s (2 processes) | vfl / CHEETAH CPU | vfl wall s | "
             "CHEETAH wall s | vfl payload bytes per row | CHEETAH loopback bytes per row | CHEETAH / vfl bytes | "
             "vfl max abs error | CHEETAH max abs error | load (1 min) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for size in doc["products"]:
        v, c, n = size["runs"]["vfl"], size["runs"]["CHEETAH"], size["rows"]
        loads = [x for r in v + c for x in r["load"]]
        lines.append(f"| {n:,} x {size['cols']} x {size['cols']} | {med(v, 'cpu_s'):.2f} | {med(c, 'cpu_s'):.2f} | "
                     f"{med(v, 'cpu_s') / med(c, 'cpu_s'):.1f} | {med(v, 'wall_s'):.2f} | {med(c, 'wall_s'):.2f} | "
                     f"{med(v, 'bytes') / n:,.0f} | {med(c, 'bytes') / n:,.0f} | "
                     f"{med(c, 'bytes') / med(v, 'bytes'):.1f} | {max(r['max_abs_error'] for r in v):.1e} | "
                     f"{max(r['max_abs_error'] for r in c):.1e} | {min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines)


def _faster(a: float, b: float, less: str = "less") -> str:
    """'X.Y× less' (or 'more') from a's point of view against b (both CPU seconds or both bytes)."""
    ratio = b / a if a <= b else a / b
    digits = 2 if ratio < 1.1 else 1
    return f"{ratio:.{digits}f}x {less if a <= b else 'more'}"


def psi_summary(doc: dict) -> str:
    """One line per size: SPU's CPU against vfl's, protocol by protocol (what the docs say in words)."""
    lines = []
    for size in doc["psi"]:
        v = med(size["runs"]["vfl"], "cpu_s")
        parts = [f"{proto} {_faster(med(runs, 'cpu_s'), v)} CPU than vfl"
                 for proto, runs in size["runs"].items() if proto != "vfl" and not proto.startswith("vfl@")]
        older = [f"; vfl {_faster(v, med(runs, 'cpu_s'))} CPU than {proto} (the tree before the change)"
                 for proto, runs in size["runs"].items() if proto.startswith("vfl@")]
        lines.append(f"* {size['ids_per_party']:,} IDs per party: SPU " + ", ".join(parts) + "".join(older) + ".")
    return "\n".join(lines)


def product_summary(doc: dict) -> str:
    """One line per size: CPU, bytes and error of CHEETAH against vfl, and the bytes' time at two line rates."""
    lines = []
    for size in doc["products"]:
        v, c, n = size["runs"]["vfl"], size["runs"]["CHEETAH"], size["rows"]
        vb, cb = med(v, "bytes"), med(c, "bytes")
        rates = "; ".join(f"at {label} {8 * cb / bps:.2f} s for CHEETAH's bytes against {8 * vb / bps:.2f} s for "
                          f"vfl's" for label, bps in (("100 Mbit/s", 1e8), ("1 Gbit/s", 1e9)))
        cpu = _faster(med(c, "cpu_s"), med(v, "cpu_s"))
        lines.append(f"* {n:,} x {size['cols']} x {size['cols']}: CHEETAH used {cpu} CPU than vfl and sent "
                     f"{_faster(cb, vb, 'fewer')} bytes ({cb / n:,.0f} against {vb / n:,.0f} per row); "
                     f"its largest error {max(r['max_abs_error'] for r in c):.1e} against vfl's "
                     f"{max(r['max_abs_error'] for r in v):.1e} (vfl's integers exact). Line time of the bytes alone "
                     f"(computed, not measured): {rates}.")
    sizes = sorted(doc["products"], key=lambda x: x["rows"])
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        dn = hi["rows"] - lo["rows"]
        per_row = {who: 1e6 * (med(hi["runs"][who], "cpu_s") - med(lo["runs"][who], "cpu_s")) / dn
                   for who in ("vfl", "CHEETAH")}
        lines.append(f"* CPU per row between {lo['rows']:,} and {hi['rows']:,} rows: vfl {per_row['vfl']:.0f} µs, "
                     f"CHEETAH {per_row['CHEETAH']:.0f} µs (both parties together).")
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def _vfl_threads() -> int:
    from vfl.secure.psi import usable_cores

    return usable_cores()


def _vfl_x25519() -> str:
    """Which X25519 vfl's PSI blinding runs on in this interpreter (vfl.secure.psi.fast_backend)."""
    from vfl.secure.psi import fast_backend

    return ("crypto_mb mbx_x25519_mb8 (blind), libsodium (reblind)" if fast_backend() is not None
            else "libsodium")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--psi", default="10000,100000", help="IDs per party, comma-separated ('' skips PSI)")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help=f"SPU PSI protocols among {PROTOCOLS}")
    ap.add_argument("--baseline", default="", metavar="REF", help="also run vfl's alignment as it is at this git "
                    "commit (e.g. the P-256 ring before the Curve25519 change) on the same IDs ('' skips)")
    ap.add_argument("--products", default="10000", help="rows of the n x 10 x 10 products ('' skips them)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating vfl/SPU runs per size (medians reported)")
    ap.add_argument("--wan", default="", help="also run CHEETAH over wan.py's links at these rows ('' skips)")
    ap.add_argument("--links", default="unshaped,100mbit-20ms,1gbit-2ms", help="wan.py's link names for --wan")
    ap.add_argument("--wan-party", type=int, help=argparse.SUPPRESS)   # one CHEETAH party inside a namespace
    ap.add_argument("--hosts", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="write the results here (rewritten whole after every size)")
    ap.add_argument("--markdown", type=Path, help="print the docs' tables from this JSON and exit (no spu needed)")
    ap.add_argument("--markdown-wan", type=Path, help="with --markdown: also the WAN table of this JSON against "
                    "docs/data/wan.json's vfl runs")
    args = ap.parse_args(argv)
    if args.markdown:
        shown = json.loads(args.markdown.read_text())
        blocks = [psi_markdown(shown), psi_summary(shown), product_markdown(shown), product_summary(shown)]
        if args.markdown_wan:
            wan_doc = json.loads(args.markdown_wan.read_text())
            vfl_wan = json.loads((ROOT / "docs" / "data" / "wan.json").read_text())
            blocks += [wan_markdown(wan_doc), wan_summary(wan_doc, vfl_wan)]
        print("\n\n".join(blocks))
        return 0
    require_spu()
    import spu

    if args.wan_party is not None:
        cheetah_party(args.wan_party, _Printer(), args.hosts.split(","), int(args.products), args.seed)
        return 0
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    protocols = [p for p in args.protocols.split(",") if p]
    if not set(protocols) <= set(PROTOCOLS):
        ap.error(f"--protocols: choose among {PROTOCOLS}")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    private_network()
    code = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    doc: dict[str, Any] = {
        "command": f"nice -n {os.nice(0)} python benchmarks/spu_compare.py " + shlex.join(argv or sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "code": code, "spu": spu.__version__, "cpus": os.cpu_count(), "repeats": args.repeats,
        "vfl_curve": "Curve25519", "vfl_threads": _vfl_threads(), "vfl_x25519": _vfl_x25519(),
        "psi": [], "products": [], "wan": [],
    }

    def save() -> None:   # after every size, whole (a later failure keeps the sizes that finished)
        if args.json:
            tmp = args.json.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            tmp.replace(args.json)

    product_runs([int(s) for s in args.products.split(",") if s], args.repeats, doc["products"], save)
    wan_runs([int(s) for s in args.wan.split(",") if s], [x for x in args.links.split(",") if x], doc["wan"], save)
    with tempfile.TemporaryDirectory() as tree:
        baseline = (args.baseline, baseline_tree(args.baseline, Path(tree))) if args.baseline else None
        psi_runs([int(s) for s in args.psi.split(",") if s], args.repeats, protocols, doc["psi"], save, baseline)
    print(psi_markdown(doc) + "\n\n" + product_markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
