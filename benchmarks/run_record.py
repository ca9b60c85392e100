"""What the split-based utility benchmarks share: their command line and the record of a run.

``benchmarks/utility.py``, ``logistic_utility.py``, ``two_sided_noise.py`` and ``utility_shares.py`` each repeat a
fit over random train/test splits. They take the same options (``--splits``, ``--quick``, ``--seed``,
``--data-dir``, ``--out``) and write one JSON document per run that names the command, the vfl commit and the
time it took, from which they print the Markdown tables their docs page quotes (checked by its test). Run as scripts
(``python benchmarks/utility.py``) the benchmarks find this module next to them; the docs tests load them with
``tests/docs_tables.load_benchmark``, which puts this folder on ``sys.path`` first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["git_commit", "split_parser", "parse_split_args", "data_finder", "write_run"]


def git_commit() -> str | None:
    """The short commit of the tree the benchmark runs from (None outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent, timeout=30).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None


def split_parser(doc: str | None, *, splits: int, quick_splits: int, quick_help: str, split_help: str,
                 data_help: str | None) -> argparse.ArgumentParser:
    """The shared options; ``--quick`` runs ``quick_splits`` splits (``quick_help`` says what else it drops);
    ``data_help`` None: the benchmark reads no data files (no ``--data-dir``)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    parser.add_argument("--splits", type=int, default=splits, help=f"{split_help} (default {splits})")
    parser.add_argument("--quick", action="store_true", help=f"{quick_splits} splits, {quick_help}")
    parser.add_argument("--seed", type=int, default=2024, help="seed of the splits and the noise (default 2024)")
    if data_help is not None:
        parser.add_argument("--data-dir", type=Path, default=None, help=data_help)
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.set_defaults(quick_splits=quick_splits)
    return parser


def parse_split_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parsed options with ``splits`` resolved for ``--quick`` (at least 2, else the usage error)."""
    args = parser.parse_args(argv)
    args.splits = args.quick_splits if args.quick else args.splits
    if args.splits < 2:
        parser.error("--splits must be at least 2")
    return args


def data_finder(args: argparse.Namespace) -> Callable[[str], Path | None]:
    """``find(file)``: the file in ``--data-dir``, or None (the loaders then use their own search and download)."""
    folder = getattr(args, "data_dir", None)
    return (lambda name: folder / name) if folder else (lambda name: None)


def write_run(script: str, argv: Sequence[str] | None, args: argparse.Namespace, start: float, fields: dict[str, Any],
              markdown: Callable[[dict], str]) -> dict:
    """Write the run's JSON to ``args.out`` (command, commit, splits, seed, seconds, then ``fields``), print its
    tables and a summary line; returns the document."""
    shown = list(sys.argv[1:] if argv is None else argv)
    doc = {"command": f"python benchmarks/{script} " + " ".join(shown), "vfl_commit": git_commit(), **{
        k: v for k, v in fields.items() if k in ("delta", "epsilons")}, "splits": args.splits, "seed": args.seed,
        "seconds": round(time.perf_counter() - start, 1), **{k: v for k, v in fields.items()
                                                             if k not in ("delta", "epsilons")}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(markdown(doc))
    print(f"{len(doc.get('rows', []))} rows in {doc['seconds']} s -> {args.out}")
    return doc
