"""`vfl demo`: a coordinator and two parties as separate local processes on synthetic data.

The data set is built in (no download): ``rows`` records, party ``alice`` holds three columns and the
label, party ``bob`` two columns, a shared ``id`` column aligns them. Column and label bounds are
declared in a public bounds file, so no bound is taken from the data. The demo runs exactly the
commands a deployment would run (`vfl keys` for throwaway CURVE certificates and signing identities, `vfl
coordinator`, `vfl party` twice) and then compares the released coefficients with the non-private least-squares
fit on the same prepared data. (A deployment gives each party only its own secrets; the demo keeps them in one
folder.)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vfl.exceptions import PartyFailure

__all__ = ["make_demo_data", "run_demo", "check_demo", "free_port", "wait_all"]

ALICE_BOUNDS = {"age": (18.0, 90.0), "income": (0.0, 200.0), "tenure": (0.0, 40.0)}
BOB_BOUNDS = {"visits": (0.0, 50.0), "spend": (0.0, 10.0)}
LABEL_BOUNDS = {"score": (0.0, 100.0)}
TRUE_UNIT_W = np.array([0.35, -0.25, 0.2, 0.3, -0.15])


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_demo_data(folder: Path, rows: int, seed: int) -> dict[str, Path]:
    """Write alice.csv, bob.csv and bounds.toml; return their paths."""
    rng = np.random.default_rng(seed)
    bounds = {**ALICE_BOUNDS, **BOB_BOUNDS}
    U = rng.uniform(-1, 1, size=(rows, len(bounds)))
    lo = np.array([b[0] for b in bounds.values()])
    hi = np.array([b[1] for b in bounds.values()])
    X = lo + (U + 1) / 2 * (hi - lo)
    y_unit = np.clip(U @ TRUE_UNIT_W + rng.normal(0, 0.1, rows), -1, 1)
    y = LABEL_BOUNDS["score"][0] + (y_unit + 1) / 2 * (LABEL_BOUNDS["score"][1] - LABEL_BOUNDS["score"][0])
    ids = [f"r{i:06d}" for i in range(rows)]
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"alice": folder / "alice.csv", "bob": folder / "bob.csv", "bounds": folder / "bounds.toml"}
    with open(paths["alice"], "w") as fh:
        fh.write("id,age,income,tenure,score\n")
        for i in range(rows):
            fh.write(f"{ids[i]},{X[i, 0]:.6f},{X[i, 1]:.6f},{X[i, 2]:.6f},{y[i]:.6f}\n")
    with open(paths["bob"], "w") as fh:
        fh.write("id,visits,spend\n")
        for i in range(rows):
            fh.write(f"{ids[i]},{X[i, 3]:.6f},{X[i, 4]:.6f}\n")
    lines = ["# public bounds of every column (declared, not computed from the data)", "[bounds]"]
    lines += [f"{k} = [{v[0]}, {v[1]}]" for k, v in {**bounds, **LABEL_BOUNDS}.items()]
    paths["bounds"].write_text("\n".join(lines) + "\n")
    return paths


def wait_all(procs: list[subprocess.Popen], timeout: float, poll: float = 0.1) -> list[int]:
    """Exit codes of all processes; as soon as one fails the others are killed (no waiting for their own
    timeouts: a coordinator that dies at start-up used to leave the demo hanging for ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            break
        time.sleep(poll)
    return [int(p.returncode) for p in procs]


MIN_DEMO_ROWS = 10


def check_demo(*, rows: int, mechanism: str, epsilon: float, delta: float, key_bits: int, timeout: float,
               workdir: str | None) -> None:
    """Refuse a demo the coordinator or the parties would refuse (the coordinator's own RunSettings checks), and
    a ``workdir`` that holds files, before anything starts (issue 21: ``--epsilon 0`` started three processes)."""
    from vfl.exceptions import ConfigurationError
    from vfl.protocols.settings import RunSettings

    if isinstance(rows, bool) or not isinstance(rows, int) or rows < MIN_DEMO_ROWS:
        raise ConfigurationError(f"--rows must be an integer >= {MIN_DEMO_ROWS}, got {rows}")
    RunSettings(n_parties=2, mechanism=mechanism, epsilon=epsilon, delta=delta, key_bits=key_bits,
                allow_insecure_keys=key_bits < 2048, timeout=timeout).validate()
    if workdir is not None:
        folder = Path(workdir)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise ConfigurationError(f"--out-dir {workdir}: give a new or empty folder (it receives the demo's data, "
                                     "keys and model)")


def _vfl_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "vfl.cli", *args]


def run_demo(*, rows: int = 1000, mechanism: str = "gaussian-fm", epsilon: float = 1.0, delta: float = 1e-5,
             key_bits: int = 2048, seed: int = 0, timeout: float = 120.0,
             echo: Callable[[str], None] = print, workdir: str | None = None) -> dict:
    """Run the demo; returns timings and the model path. Raises PartyFailure if any process fails.

    Every parameter is checked (:func:`check_demo`) before a file is written or a process started. ``workdir``:
    write the data, keys and model there and keep them (a new or empty folder); default: a temporary folder
    that is removed at the end (and not printed).
    """
    check_demo(rows=rows, mechanism=mechanism, epsilon=epsilon, delta=delta, key_bits=key_bits, timeout=timeout,
               workdir=workdir)
    tmp = tempfile.TemporaryDirectory(prefix="vfl-demo-") if workdir is None else None
    folder = Path(workdir or tmp.name)  # type: ignore[union-attr]
    try:
        paths = make_demo_data(folder, rows, seed)
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        out = folder / "model.json"
        insecure = ["--insecure-test-keys"] if key_bits < 2048 else []
        # the demo's operator chose the plan: both parties accept exactly it (their policy, issue 14)
        policy = ["--allow-mechanisms", mechanism, "--max-epsilon", f"{max(epsilon, 10.0):.17g}",
                  "--max-delta", f"{max(delta, 1e-3):.17g}"]
        echo(f"vfl demo: {rows} synthetic rows, alice = age, income, tenure + label score; bob = visits, spend")
        echo(f"          mechanism {mechanism}, epsilon {epsilon:g}, delta {delta:g}, {key_bits}-bit Paillier keys"
             + (" (INSECURE test size)" if insecure else ""))
        echo(f"          data, keys and model in {folder} (kept)" if tmp is None else
             "          data, keys and model in a temporary folder, removed at the end (--out-dir DIR keeps them)")
        coord_cmd = _vfl_command("coordinator", "--parties", "2", "--mechanism", mechanism, "--epsilon", str(epsilon),
                                 "--delta", str(delta), "--bind", url, "--out", out.name, "--key-bits", str(key_bits),
                                 "--timeout", str(timeout), *insecure)
        party_cmds = [
            _vfl_command("party", "--connect", url, "--name", "alice", "--data", str(paths["alice"]), "--features",
                         "age,income,tenure", "--label", "score", "--id", "id", "--bounds", str(paths["bounds"]),
                         "--no-progress", "--timeout", str(timeout), *insecure, *policy),
            _vfl_command("party", "--connect", url, "--name", "bob", "--data", str(paths["bob"]), "--features",
                         "visits,spend", "--id", "id", "--bounds", str(paths["bounds"]), "--no-progress",
                         "--timeout", str(timeout), *insecure, *policy),
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        keys = folder / "keys"
        made = subprocess.run(_vfl_command("keys", "--out", str(keys), "--names", "alice,bob"), env=env,
                              capture_output=True, text=True)
        if made.returncode:
            raise PartyFailure(f"demo failed: vfl keys: {made.stderr.strip()}")
        coord_cmd += ["--curve-dir", str(keys)]
        # the demo's runs are not the user's: each party records them in a throwaway ledger in the demo's folder
        # (a relative path: the parties run there, and print no path of a temporary folder that will be gone)
        party_cmds = [[*cmd, "--curve-dir", str(keys), "--identity-dir", str(keys), "--ledger",
                       f"ledger-{name}.sqlite"] for cmd, name in zip(party_cmds, ("alice", "bob"), strict=True)]
        start = time.perf_counter()
        procs = [subprocess.Popen(coord_cmd, env=env, cwd=folder)]   # it prints "model written to model.json"
        try:
            procs += [subprocess.Popen(cmd, env=env, cwd=folder) for cmd in party_cmds]
            codes = wait_all(procs, timeout + 60)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        wall = time.perf_counter() - start
        if any(codes):
            raise PartyFailure(f"demo failed: exit codes coordinator={codes[0]}, alice={codes[1]}, bob={codes[2]}")
        from vfl.models.modelio import load_model

        model = load_model(out)
        _compare(model, paths, echo)
        echo(f"vfl demo: finished in {wall:.1f} s (three processes over ZeroMQ on loopback)"
             + (f"; model in {out}" if tmp is None else ""))
        return {"wall_seconds": wall, "model": str(out) if tmp is None else None}
    finally:
        if tmp is not None:
            tmp.cleanup()


def _compare(model, paths: dict[str, Path], echo: Callable[[str], None]) -> None:  # noqa: ANN001
    from vfl.data.config import read_party_csv

    a = read_party_csv(paths["alice"], "age,income,tenure", label="score")
    b = read_party_csv(paths["bob"], "visits,spend")
    X = np.hstack([a.X, b.X])
    assert a.y is not None
    A = np.hstack([X, np.ones((X.shape[0], 1))])
    ols = np.linalg.lstsq(A, a.y, rcond=None)[0]
    echo("")
    echo(f"{'feature':>10} {'released':>12} {'OLS (not private)':>18}")
    for name, c, o in zip(model.feature_names_, model.coef_, ols[:-1], strict=True):
        echo(f"{name:>10} {c:12.4f} {o:18.4f}")
    echo(f"{'intercept':>10} {model.intercept_:12.4f} {ols[-1]:18.4f}")
    r2_ols = 1 - np.var(a.y - A @ ols) / np.var(a.y)
    echo(f"R^2 on the training rows: released {model.score(X, a.y):.4f}, OLS {r2_ols:.4f}")
