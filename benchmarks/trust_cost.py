"""Cost of the trust measures (issue 20): the same measurements on a baseline tree and on this tree, side by side.

    nice -n 5 python benchmarks/trust_cost.py [--baseline-ref 9ac3130] [--repeats 3] [--quick] [--out FILE.json]

One invocation measures both trees. The baseline is checked out with ``git worktree add --detach`` into a temporary
directory (removed at the end); every measurement runs in child processes whose ``PYTHONPATH`` is the tree being
measured (the current tree is the repository this script lives in, including uncommitted edits; the JSON lists
them). The children call only what both versions have: :func:`vfl.secure.products.secure_gram` and the ``vfl``
command line (``python -m vfl.cli``). Inputs are written once by this process, so both trees read identical files.

* **Secure products** ``A^T B`` with 2048-bit keys: the forest-fires shape (517 x 13 by 517 x 14: the 27 forest
  fires features of :mod:`vfl.data.datasets` mapped to [-1, 1] by their public bounds when ``../shared/data`` holds
  the file, otherwise uniform in [-1, 1]; the JSON says which) and 10^5 x 10 x 10 (uniform, skipped by ``--quick``).
  Both trees use one Paillier key made here (key generation is not measured) and the same noise matrix. After one
  warm-up product on 200 rows (per-key setup: fixed-base tables), each repeat records CPU seconds of the child
  including its process-pool workers (``getrusage`` SELF + CHILDREN), wall seconds, and the largest difference
  from numpy's ``A^T B + noise``. Median of ``--repeats`` (``--repeats-large`` for 10^5, default 1).
* **End-to-end CLI**: ``vfl coordinator`` and two ``vfl party`` processes on loopback ZeroMQ, Gaussian FM,
  epsilon 1, delta 1e-5, 2048-bit keys, forest fires (alice 23 features + label, bob 4; same data source as above),
  without row IDs and with ``--id`` (private set intersection). The current tree gets signing identities from
  ``vfl keys --out DIR --names alice,bob`` (``--identity-dir DIR``) when its ``vfl party`` has that option, else
  ``--insecure-no-identity`` if it has that, else nothing (the JSON records which). CPU seconds of the three
  processes including their pool workers (``os.wait4``), wall seconds from launch until all have exited. When the
  current tree has both ``--identity-dir`` and ``--insecure-no-identity``, one more pair isolates the signatures:
  the current tree's ``--id`` run without and with identities.
* **Start-up**: per tree, one ``python -c`` importing what a coordinator process of the CLI run imports, and one
  for a party (:data:`STARTUP_IMPORTS`). A second table subtracts a coordinator's and two parties' start-ups from
  each CLI row, since start-up time also changed for reasons other than trust (lazy imports).

Runs of the two trees alternate (baseline, current, baseline, ...) so that load from other users of the machine
falls on both. Prints a Markdown table with the ratios current / baseline and writes everything to ``--out``
(default: a file in a new temporary directory, never the repository unless asked).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED_FOREST = ROOT.parent / "shared" / "data" / "forestfires.csv"
PRECISION_BITS = 24          # vfl.secure.encoding.DEFAULT_PRECISION_BITS in both trees (checked by the child)
NOISE_SIGMA = 1e-3           # real units; the product's noise matrix is N(0, sigma^2) rounded to 2^-2p
CHILD_TIMEOUT = 6 * 3600.0
WARMUP_ROWS = 200


# ----------------------------------------------------------------------------- child: one tree's secure products
def _cpu_seconds() -> float:
    """User + system CPU of this process and of its reaped children (the products' process-pool workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def child_products(spec_path: str) -> None:
    """Run in a child with PYTHONPATH = the measured tree: secure_gram on the spec's inputs, results as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    from phe import paillier

    import vfl
    from vfl.secure.encoding import DEFAULT_PRECISION_BITS
    from vfl.secure.products import secure_gram

    tree = Path(spec["tree"]).resolve()
    if tree not in Path(vfl.__file__).resolve().parents:
        raise SystemExit(f"imported vfl from {vfl.__file__}, not from {tree}")
    if DEFAULT_PRECISION_BITS != PRECISION_BITS:
        raise SystemExit(f"precision bits {DEFAULT_PRECISION_BITS} != {PRECISION_BITS}")
    key = json.loads(Path(spec["key"]).read_text())
    public = paillier.PaillierPublicKey(int(key["p"]) * int(key["q"]))
    keypair = (public, paillier.PaillierPrivateKey(public, int(key["p"]), int(key["q"])))
    A, B, noise = np.load(spec["a"]), np.load(spec["b"]), np.load(spec["noise"])
    exact = A.T @ B + noise / 2.0 ** (2 * PRECISION_BITS)
    kwargs = {"key_bits": spec["key_bits"], "keypair": keypair, "workers": spec["workers"]}
    t0, c0 = time.perf_counter(), _cpu_seconds()
    secure_gram(A[:WARMUP_ROWS], B[:WARMUP_ROWS], noise=noise, **kwargs)
    out: dict = {"vfl_file": vfl.__file__, "warmup_wall_s": time.perf_counter() - t0,
                 "warmup_cpu_s": _cpu_seconds() - c0, "runs": []}
    for _ in range(spec["repeats"]):
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), _cpu_seconds()
        G = secure_gram(A, B, noise=noise, **kwargs)
        wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
        out["runs"].append({"cpu_s": cpu, "wall_s": wall, "max_abs_err": float(np.max(np.abs(G - exact))),
                            "load_1min": load})
    Path(spec["result"]).write_text(json.dumps(out))


def child_signature_costs(spec_path: str) -> None:
    """Run in a child on the current tree: what one signed relayed message costs, by its parts. The digest a party
    signs hashes every payload frame (:func:`vfl.secure.identity.message_digest`; a ciphertext frame is an
    ``IntArray`` of 4096-bit ints, each serialised then hashed), so its cost grows with the ciphertexts sent; the
    Ed25519 signature and verification (PyNaCl) are per message."""
    spec = json.loads(Path(spec_path).read_text())
    from nacl.signing import SigningKey

    from vfl.net.messages import IntArray
    from vfl.secure.identity import message_digest
    from vfl.secure.packing import SlotLayout, default_noise_bits

    rng = np.random.default_rng(5)
    count = 20_000
    frame = IntArray.of([int.from_bytes(rng.bytes(512), "big") for _ in range(count)])
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        digest = message_digest("enc_chunk", {"block": 1, "chunk": 0}, [frame])
        best = min(best, time.process_time() - t0)
    key = SigningKey.generate()
    t0 = time.process_time()
    signed = [key.sign(digest) for _ in range(2000)]
    sign = (time.process_time() - t0) / 2000
    t0 = time.process_time()
    for m in signed:
        key.verify_key.verify(m)
    verify = (time.process_time() - t0) / 2000
    n, d = spec["rows_1e5"], spec["cols_1e5"]
    ciphertexts = n * SlotLayout(2048, n, PRECISION_BITS, 1.0, default_noise_bits(PRECISION_BITS)).n_groups(d)
    out = {"digest_us_per_ciphertext": 1e6 * best / count, "ed25519_sign_us": 1e6 * sign,
           "ed25519_verify_us": 1e6 * verify, "ciphertexts_1e5": ciphertexts,
           "digest_s_1e5_sender_and_receiver": 2 * ciphertexts * best / count}
    Path(spec["result"]).write_text(json.dumps(out))


# ----------------------------------------------------------------------------- parent: inputs
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def forest_source() -> tuple[str, dict | None]:
    """('forest fires ...', data dict) from vfl.data.datasets when ../shared/data has the file, else synthetic."""
    if not SHARED_FOREST.is_file():
        return "synthetic, uniform in [-1, 1] (../shared/data/forestfires.csv not found)", None
    sys.path.insert(0, str(ROOT))
    from vfl.data.datasets import forest_fires, public_bounds

    data = forest_fires(SHARED_FOREST)
    bounds = public_bounds("forestfires", dataset=data)
    return f"forest fires ({SHARED_FOREST.name} from ../shared/data via vfl.data.datasets)", {
        "X": data.X, "y": data.y, "names": list(data.feature_names), "target": data.target_name,
        "bounds": bounds, "parties": list(data.party_columns.values())}


def product_inputs(folder: Path, forest: dict | None, large: bool, seed: int = 20) -> dict[str, dict[str, str]]:
    """npy files of each shape: A, B in [-1, 1] and an integer noise matrix in units 2^-2p."""
    rng = np.random.default_rng(seed)
    shapes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if forest is None:
        shapes["forest"] = rng.uniform(-1, 1, (517, 13)), rng.uniform(-1, 1, (517, 14))
    else:
        lo = np.array([forest["bounds"][c][0] for c in forest["names"]])
        hi = np.array([forest["bounds"][c][1] for c in forest["names"]])
        U = np.clip((2 * forest["X"] - lo - hi) / (hi - lo), -1.0, 1.0)   # FM's affine map of the public bounds
        shapes["forest"] = U[:, :13], U[:, 13:27]
    if large:
        shapes["1e5"] = rng.uniform(-1, 1, (100_000, 10)), rng.uniform(-1, 1, (100_000, 10))
    files = {}
    for name, (A, B) in shapes.items():
        noise = np.rint(rng.normal(0, NOISE_SIGMA, (A.shape[1], B.shape[1])) * 2.0 ** (2 * PRECISION_BITS))
        paths = {k: str(folder / f"{name}_{k}.npy") for k in ("a", "b", "noise")}
        for k, v in zip(("a", "b", "noise"), (A, B, noise.astype(np.int64)), strict=True):
            np.save(paths[k], v)
        files[name] = paths
    return files


def _csv(path: Path, header: list[str], columns: list[np.ndarray], ids: list[str]) -> None:
    with open(path, "w") as fh:
        fh.write(",".join(["id", *header]) + "\n")
        for i, row in enumerate(zip(*columns, strict=True)):
            fh.write(",".join([ids[i], *(f"{float(v):.17g}" for v in row)]) + "\n")


def cli_inputs(folder: Path, forest: dict | None, seed: int = 21) -> dict:
    """alice.csv (23 features + label), bob.csv (4 features), bounds.toml; shuffled IDs for the --id runs."""
    rng = np.random.default_rng(seed)
    if forest is None:
        names_a, names_b = [f"a{j}" for j in range(23)], [f"b{j}" for j in range(4)]
        X = rng.uniform(-1, 1, (517, 27))
        y = np.clip(X @ rng.uniform(-0.3, 0.3, 27) + rng.normal(0, 0.2, 517), -1, 1)
        bounds = {c: (-1.0, 1.0) for c in [*names_a, *names_b, "y"]}
        target = "y"
    else:
        names_a, names_b = forest["parties"]
        index = {c: i for i, c in enumerate(forest["names"])}
        X = forest["X"][:, [index[c] for c in [*names_a, *names_b]]]
        y, target, bounds = forest["y"], forest["target"], forest["bounds"]
    ids = [f"r{i:05d}" for i in rng.permutation(len(y))]
    paths = {"alice": folder / "alice.csv", "bob": folder / "bob.csv", "bounds": folder / "bounds.toml"}
    _csv(paths["alice"], [*names_a, target], [*X[:, :len(names_a)].T, y], ids)
    _csv(paths["bob"], names_b, list(X[:, len(names_a):].T), ids)
    lines = ["[bounds]"] + [f'"{c}" = [{float(bounds[c][0])!r}, {float(bounds[c][1])!r}]'
                            for c in [*names_a, *names_b, target]]
    paths["bounds"].write_text("\n".join(lines) + "\n")
    return {"paths": {k: str(v) for k, v in paths.items()}, "alice": names_a, "bob": names_b, "label": target}


# ----------------------------------------------------------------------------- parent: trees
def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of every child measuring ``tree``: its directory first on PYTHONPATH, single-threaded BLAS."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VFL_FORESTFIRES", "VFL_DATA_DIR")}
    return {**env, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "VFL_LEDGER": str(Path(tempfile.gettempdir()) / "vfl-benchmark-ledgers")}   # never the user's ledger


def _vfl(tree: Path, *args: str, cwd: Path, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vfl.cli", *args], cwd=cwd, env=tree_env(tree), timeout=timeout,
                          capture_output=True, text=True)


def describe_tree(name: str, tree: Path, work: Path) -> dict:
    """Commit, uncommitted paths, where ``vfl`` is imported from, and how its parties get identities."""
    info: dict = {"path": str(tree), "commit": _git("rev-parse", "HEAD", cwd=tree),
                  "subject": _git("log", "-1", "--format=%s", cwd=tree)[:100],
                  "uncommitted": [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no",
                                                          cwd=tree).splitlines()]}
    probe = subprocess.run([sys.executable, "-c", "import vfl; print(vfl.__file__)"], cwd=work, env=tree_env(tree),
                           capture_output=True, text=True, check=True).stdout.strip()
    if tree.resolve() not in Path(probe).resolve().parents:
        raise SystemExit(f"{name}: PYTHONPATH={tree} imports vfl from {probe}")
    info["vfl_file"] = probe
    helptext = _vfl(tree, "party", "--help", cwd=work).stdout
    info["has_no_identity_flag"] = "--insecure-no-identity" in helptext
    if "--identity-dir" in helptext:
        ident = work / f"identities_{name}"
        done = _vfl(tree, "keys", "--out", str(ident), "--names", "alice,bob", cwd=work)
        if done.returncode:
            raise SystemExit(f"{name}: vfl keys failed: {done.stderr.strip()[-500:]}")
        info["identity"], info["identity_args"] = "--identity-dir (vfl keys)", ["--identity-dir", str(ident)]
    elif "--insecure-no-identity" in helptext:
        info["identity"], info["identity_args"] = "--insecure-no-identity", ["--insecure-no-identity"]
    else:
        info["identity"], info["identity_args"] = "none (no identity options)", []
    return info


# ----------------------------------------------------------------------------- parent: measurements
def run_products(tree: Path, files: dict[str, str], key_file: Path, repeats: int, workers: int | None,
                 work: Path, tag: str) -> dict:
    """One child process on ``tree``: warm-up, then ``repeats`` secure products of one shape."""
    spec = {"tree": str(tree), "key": str(key_file), "key_bits": 2048, "repeats": repeats, "workers": workers,
            "result": str(work / f"{tag}.result.json"), **files}
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child-products", str(spec_path)],
                          cwd=work, env=tree_env(tree), timeout=CHILD_TIMEOUT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tag}: child failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}")
    return json.loads(Path(spec["result"]).read_text())


def _party_cmd(name: str, cli: dict, url: str, with_id: bool, aligned: bool = False) -> list[str]:
    label = ["--label", cli["label"]] if name == "alice" else []
    ids = ["--id", "id"] if with_id else (["--rows-aligned"] if aligned else [])
    return ["party", "--name", name, "--connect", url, "--data", cli["paths"][name], "--features",
            ",".join(cli[name]), *label, *ids, "--bounds", cli["paths"]["bounds"], "--no-progress",
            "--timeout", "300", "--allow-mechanisms", "gaussian-fm"]


# What a coordinator / party process of the CLI run imports in either tree (checked with python -X importtime on
# 9ac3130 and on the trust work: 9ac3130 imports all of scipy with vfl.cli; the later tree imports lazily, the
# coordinator scipy.special at its calibration, a party scipy.special and pandas). Re-importing is free, so each
# probe costs a tree what that role's process spends starting up.
STARTUP_IMPORTS = {"coordinator": "import vfl.cli, vfl.net.coordinator, scipy.special",
                   "party": "import vfl.cli, vfl.net.party, scipy.special, pandas"}


def run_signature_costs(tree: Path, work: Path) -> dict | None:
    """:func:`child_signature_costs` on ``tree``; None (with the reason printed) when the tree has no identities."""
    spec = {"rows_1e5": 100_000, "cols_1e5": 10, "result": str(work / "signature_costs.json")}
    (work / "signature_costs.spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child-signatures",
                           str(work / "signature_costs.spec.json")], cwd=work, env=tree_env(tree),
                          timeout=CHILD_TIMEOUT, capture_output=True, text=True)
    if done.returncode:
        print(f"# signature costs not measured: {done.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(Path(spec["result"]).read_text())


def run_startup(tree: Path, work: Path, role: str) -> dict:
    """One ``python -c STARTUP_IMPORTS[role]`` of ``tree``: interpreter start-up and the imports of that role."""
    start = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", STARTUP_IMPORTS[role]], cwd=work, env=tree_env(tree),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{tree}: python -c {STARTUP_IMPORTS[role]!r} exited with {p.returncode}")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.perf_counter() - start}


def run_cli(tree: Path, identity_args: list[str], cli: dict, work: Path, tag: str, with_id: bool) -> dict:
    """Coordinator + alice + bob as real processes of ``tree``; CPU (incl. pool workers) and wall seconds."""
    url = f"tcp://127.0.0.1:{_free_port()}"
    out = work / f"{tag}.model.json"
    # a tree whose parties run without --id only when their operator states the rows are aligned (issue 31)
    aligned = not with_id and "--rows-aligned" in _vfl(tree, "party", "--help", cwd=work).stdout
    cmds = {"coordinator": ["coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1",
                            "--delta", "1e-5", "--bind", url, "--out", str(out), "--key-bits", "2048",
                            "--timeout", "300"],
            **{name: [*_party_cmd(name, cli, url, with_id, aligned), *identity_args] for name in ("alice", "bob")}}
    logs = {name: open(work / f"{tag}.{name}.log", "w") for name in cmds}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    procs = {name: subprocess.Popen([sys.executable, "-m", "vfl.cli", *cmd], cwd=work, env=tree_env(tree),
                                    stdout=logs[name], stderr=subprocess.STDOUT) for name, cmd in cmds.items()}
    cpu: dict[str, float] = {}
    codes: dict[str, int] = {}
    deadline = time.monotonic() + 900
    while len(codes) < len(procs):
        for name, p in procs.items():
            if name not in codes:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)   # rusage of the process and its reaped workers
                if pid == p.pid:
                    p.returncode = codes[name] = os.waitstatus_to_exitcode(status)
                    cpu[name] = usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline or any(codes.values()):
            for name, p in procs.items():
                if name not in codes:
                    p.kill()
                    codes[name] = p.wait()
        time.sleep(0.05)
    wall = time.perf_counter() - start
    for fh in logs.values():
        fh.close()
    if any(codes.values()) or not out.is_file():
        tails = {n: (work / f"{tag}.{n}.log").read_text()[-1500:] for n in cmds}
        raise SystemExit(f"{tag}: CLI run failed, exit codes {codes}\n" + "\n".join(f"--- {n}\n{t}"
                                                                                   for n, t in tails.items()))
    return {"cpu_s": sum(cpu.values()), "cpu_s_by_process": cpu, "wall_s": wall, "load_1min": load}


# ----------------------------------------------------------------------------- parent: summary
def _summary(runs: list[dict]) -> dict:
    cpu = [r["cpu_s"] for r in runs]
    out = {"cpu_s": float(np.median(cpu)), "cpu_s_min": min(cpu), "cpu_s_max": max(cpu),
           "wall_s": float(np.median([r["wall_s"] for r in runs])), "runs": runs}
    if "max_abs_err" in runs[0]:
        out["max_abs_err"] = max(r["max_abs_err"] for r in runs)
    return out


def summary_rows(measured: dict[str, dict[str, list[dict]]], labels: dict[str, tuple[str, str, str]]) -> list[dict]:
    """One row per measurement: medians before and after and the ratios after / before."""
    rows = []
    for key, runs in measured.items():
        old, new = _summary(runs["before"]), _summary(runs["after"])
        label, before, after = labels[key]
        rows.append({"key": key, "label": label, "before_is": before, "after_is": after, "before": old,
                     "after": new, "cpu_ratio": new["cpu_s"] / old["cpu_s"],
                     "wall_ratio": new["wall_s"] / old["wall_s"]})
    return rows


def markdown(rows: list[dict]) -> str:
    """The table printed at the end (and pasted into docs/performance.md)."""
    lines = ["| measurement (before -> after) | CPU s before | CPU s after | CPU after/before | wall s before "
             "| wall s after | wall after/before | max abs error before / after | CPU s min-max before / after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        old, new = r["before"], r["after"]
        err = f"{old['max_abs_err']:.1e} / {new['max_abs_err']:.1e}" if "max_abs_err" in old else "-"
        lines.append(f"| {r['label']} ({r['before_is']} -> {r['after_is']}) | {old['cpu_s']:.2f} | {new['cpu_s']:.2f} "
                     f"| {r['cpu_ratio']:.2f} | {old['wall_s']:.2f} | {new['wall_s']:.2f} | {r['wall_ratio']:.2f} "
                     f"| {err} | {old['cpu_s_min']:.2f}-{old['cpu_s_max']:.2f} / "
                     f"{new['cpu_s_min']:.2f}-{new['cpu_s_max']:.2f} |")
    return "\n".join(lines)


def net_of_startup(rows: list[dict]) -> list[dict]:
    """CPU of the baseline-vs-current CLI rows minus the start-ups of their processes (a coordinator and two
    parties) of the same tree: what the run itself costs, without the interpreter and import time that changed for
    other reasons (lazy imports)."""
    by_key = {r["key"]: r for r in rows}
    if "startup_coordinator" not in by_key or "startup_party" not in by_key:
        return []
    coord, party = by_key["startup_coordinator"], by_key["startup_party"]
    out = []
    for r in rows:
        if r["key"].startswith("cli_") and r["before_is"] == "baseline":
            old = r["before"]["cpu_s"] - coord["before"]["cpu_s"] - 2 * party["before"]["cpu_s"]
            new = r["after"]["cpu_s"] - coord["after"]["cpu_s"] - 2 * party["after"]["cpu_s"]
            out.append({"key": r["key"], "label": f"{r['label']}, CPU minus start-ups", "before_cpu_s": old,
                        "after_cpu_s": new, "cpu_ratio": new / old})
    return out


def markdown_net(rows: list[dict]) -> str:
    """The CLI rows net of start-up, as a second table."""
    lines = ["| measurement (baseline -> current) | CPU s before | CPU s after | CPU after/before |",
             "|---|---:|---:|---:|"]
    lines += [f"| {r['label']} | {r['before_cpu_s']:.2f} | {r['after_cpu_s']:.2f} | {r['cpu_ratio']:.2f} |"
              for r in rows]
    return "\n".join(lines)


def markdown_signatures(costs: dict) -> str:
    """The per-message costs of a signed relayed message (current tree), as a third table."""
    lines = ["| signed relayed message, current tree | value |", "|---|---:|",
             f"| digest, µs per 2048-bit-key ciphertext in the frames | {costs['digest_us_per_ciphertext']:.2f} |",
             f"| Ed25519 signature, µs per message | {costs['ed25519_sign_us']:.1f} |",
             f"| Ed25519 verification, µs per message | {costs['ed25519_verify_us']:.1f} |",
             f"| ciphertexts sent for a 10^5 x 10 by 10^5 x 10 product | {costs['ciphertexts_1e5']} |",
             f"| digests of them, sender and receiver, s | {costs['digest_s_1e5_sender_and_receiver']:.3f} |"]
    if "share_of_1e5_product_cpu" in costs:
        lines.append(f"| that, as % of the product's CPU | {100 * costs['share_of_1e5_product_cpu']:.2f} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- parent: main
def _write_key(path: Path) -> None:
    """One 2048-bit Paillier key for both trees' products (generated by this tree; only p and q are stored)."""
    sys.path.insert(0, str(ROOT))
    from vfl.secure.keys import generate_keypair

    _, private = generate_keypair(2048)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"p": str(private.p), "q": str(private.q)}, fh)


def measure(args: argparse.Namespace, trees: dict[str, Path], infos: dict[str, dict], work: Path,
            forest: dict | None) -> tuple[dict, dict]:
    """All measurements, before and after alternating; ({key: {"before"|"after": [runs]}}, {key: labels})."""
    key_file = work / "paillier_key.json"
    _write_key(key_file)
    files = product_inputs(work, forest, large=not args.quick)
    cli = cli_inputs(work, forest)
    old, new, ident = trees["baseline"], trees["current"], infos["current"]["identity_args"]

    def products(shape: str, tree: Path, tag: str) -> dict:
        result = run_products(tree, files[shape], key_file, 1, args.workers, work, tag)
        return {**result["runs"][0], "warmup_cpu_s": result["warmup_cpu_s"]}

    plan = [(f"startup_{role}", (f"start-up of a {role} process: python -c '{STARTUP_IMPORTS[role]}'", "baseline",
                                 "current"), args.repeats,
             lambda tag, r=role: run_startup(old, work, r), lambda tag, r=role: run_startup(new, work, r))
            for role in STARTUP_IMPORTS]
    plan.append(("products_forest", ("secure product 517 x 13 by 517 x 14 (forest-fires shape)", "baseline",
                                     "current"),
                 args.repeats, lambda tag: products("forest", old, tag), lambda tag: products("forest", new, tag)))
    if not args.quick:
        plan.append(("products_1e5", ("secure product 10^5 x 10 by 10^5 x 10", "baseline", "current"),
                     args.repeats_large, lambda tag: products("1e5", old, tag), lambda tag: products("1e5", new, tag)))
    for key, with_id, what in (("cli_forest", False, ""), ("cli_forest_id", True, ", --id (PSI)")):
        plan.append((key, (f"CLI, forest fires, Gaussian FM{what}, 3 processes", "baseline", "current"), args.repeats,
                     lambda tag, w=with_id: run_cli(old, [], cli, work, tag, w),
                     lambda tag, w=with_id: run_cli(new, ident, cli, work, tag, w)))
    if ident and ident[0] == "--identity-dir" and infos["current"]["has_no_identity_flag"]:
        plan.append(("cli_forest_id_signatures", ("CLI, forest fires, Gaussian FM, --id (PSI), current tree",
                                                  "--insecure-no-identity", "--identity-dir"), args.repeats,
                     lambda tag: run_cli(new, ["--insecure-no-identity"], cli, work, tag, True),
                     lambda tag: run_cli(new, ident, cli, work, tag, True)))
    measured: dict[str, dict[str, list[dict]]] = {}
    for key, _, repeats, before, after in plan:
        measured[key] = {"before": [], "after": []}
        for r in range(repeats):
            for side, fn in (("before", before), ("after", after)):
                measured[key][side].append(fn(f"{key}_{side}_{r}"))
                _progress(key, side, measured[key][side][-1])
    return measured, {key: labels for key, labels, *_ in plan}


def _progress(key: str, tree: str, run: dict) -> None:
    err = f", max |error| {run['max_abs_err']:.1e}" if "max_abs_err" in run else ""
    print(f"# {key} [{tree}]: CPU {run['cpu_s']:.2f} s, wall {run['wall_s']:.2f} s{err}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-ref", default="9ac3130", help="git ref of the baseline tree")
    ap.add_argument("--current-ref", default=None,
                    help="measure this git ref (in a second worktree) instead of the working tree of this repository")
    ap.add_argument("--repeats", type=int, default=3, help="runs per tree (median) of the forest shape and CLI")
    ap.add_argument("--repeats-large", type=int, default=1, help="runs per tree of the 10^5 x 10 x 10 product")
    ap.add_argument("--quick", action="store_true", help="skip the 10^5 x 10 x 10 product")
    ap.add_argument("--workers", type=int, default=None, help="secure_gram workers (default: the library's)")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: in a new temporary directory)")
    ap.add_argument("--child-products", metavar="SPEC", help=argparse.SUPPRESS)
    ap.add_argument("--child-signatures", metavar="SPEC", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_products:
        child_products(args.child_products)
        return 0
    if args.child_signatures:
        child_signature_costs(args.child_signatures)
        return 0
    work = Path(tempfile.mkdtemp(prefix="vfl-trust-cost-"))
    out = args.out or work / "trust_cost.json"
    trees = {"baseline": work / "baseline-tree", "current": ROOT if args.current_ref is None else work / "current-tree"}
    try:
        for name, ref in (("baseline", args.baseline_ref), ("current", args.current_ref)):
            if ref is not None:
                _git("worktree", "add", "--detach", str(trees[name]), ref)
        infos = {name: describe_tree(name, tree, work) for name, tree in trees.items()}
        source, forest = forest_source()
        print(f"# baseline {infos['baseline']['commit'][:10]}, current {infos['current']['commit'][:10]} "
              f"({len(infos['current']['uncommitted'])} uncommitted paths), identities: "
              f"{infos['current']['identity']}; data: {source}; work dir {work}", flush=True)
        load = os.getloadavg()[0]
        measured, labels = measure(args, trees, infos, work, forest)
        signatures = run_signature_costs(trees["current"], work)
    finally:
        for tree in trees.values():
            if tree != ROOT and tree.exists():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    rows = summary_rows(measured, labels)
    doc = {"benchmark": "benchmarks/trust_cost.py", "argv": sys.argv[1:] if argv is None else argv,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "cpus": os.cpu_count(),
           "load_1min_start_end": [load, os.getloadavg()[0]], "key_bits": 2048, "precision_bits": PRECISION_BITS,
           "noise_sigma": NOISE_SIGMA, "data": source, "baseline_ref": args.baseline_ref,
           "current_ref": args.current_ref or "working tree", "trees": infos,
           "rows": rows, "net_of_startup": net_of_startup(rows), "signature_costs": signatures}
    big = [r for r in rows if r["key"] == "products_1e5"]
    if signatures and big:
        digests = signatures["digest_s_1e5_sender_and_receiver"]
        signatures["share_of_1e5_product_cpu"] = digests / big[0]["after"]["cpu_s"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(markdown(rows))
    if doc["net_of_startup"]:
        print()
        print(markdown_net(doc["net_of_startup"]))
    if signatures:
        print("\n" + markdown_signatures(signatures))
    print(f"# JSON: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
