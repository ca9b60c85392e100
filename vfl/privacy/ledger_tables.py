"""The text and JSON that ``vfl budget show | history | export`` print from a :class:`vfl.privacy.ledger.Ledger`
(presentation only; the ledger's rules live in :mod:`vfl.privacy.ledger`)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from vfl.privacy.ledger import SCHEMA_VERSION, Budget, Ledger

__all__ = ["summary_table", "history_table", "export_document"]


def _fmt(x: float | None) -> str:
    return "inf" if x is None else f"{x:.4g}"


def summary_table(ledger: Ledger, budget: Budget | None = None) -> str:
    """``vfl budget show``: one line per budget (its dataset name; runs by state, spent, budget, left,
    composition), then what it covered (files, columns, label, rows)."""
    rows = ledger.summary(budget)
    if not rows:
        return f"privacy ledger {ledger.path}: no runs yet"
    lines = [f"privacy ledger {ledger.path}",
             f"{'dataset':<28} {'runs':>4} {'compl.':>6} {'abort.':>6} {'reserv.':>7} {'spent eps':>9} "
             f"{'budget':>14} {'left eps':>8}  composition"]
    for r in rows:
        label = r["name"]
        budget_text = "none" if r["budget"] is None else f"{r['budget'][0]:g},{r['budget'][1]:g}"
        left = "-" if r["budget"] is None else _fmt(r["left_epsilon"])
        lines.append(f"{label[:28]:<28} {r['runs']:>4} {r['completed']:>6} {r['aborted']:>6} {r['reserved']:>7} "
                     f"{_fmt(r['spent_epsilon']):>9} {budget_text:>14} {left:>8}  {r['composition']}")
        lines.append("    covers " + _covers_text(r["covers"]))
    return "\n".join(lines)


def _covers_text(c: Mapping[str, Any]) -> str:
    parts = [f"files {', '.join(c['files'])}" if c["files"] else "",
             f"columns {', '.join(c['columns'])}" if c["columns"] else "",
             f"label {', '.join(c['labels'])}" if c["labels"] else "",
             f"rows {', '.join(str(n) for n in c['rows'])}" if c["rows"] else "",
             f"{c['unrecorded_runs']} run(s) of schema 1 (files and columns not recorded)" if c["unrecorded_runs"]
             else ""]
    if c["fingerprint_keyed_runs"]:
        parts.append(f"{c['fingerprint_keyed_runs']} of them kept under a table fingerprint by schema 1, counted "
                     "here")
    return "; ".join(p for p in parts if p) or "(nothing recorded)"


def history_table(ledger: Ledger) -> str:
    """``vfl budget history``: one line per run, oldest first."""
    runs = ledger.runs()
    if not runs:
        return f"privacy ledger {ledger.path}: no runs yet"
    lines = [f"{'started (UTC)':<20} {'run':<10} {'dataset':<20} {'mechanism':<12} {'epsilon':>8} {'delta':>8} "
             f"{'state':<10} coordinator"]
    for r in runs:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.started))
        label = r.dataset[len("name:"):] if r.dataset.startswith("name:") else r.dataset
        eps = r.epsilon if math.isfinite(r.epsilon) else None
        lines.append(f"{when:<20} {r.run_id[:10]:<10} {label[:20]:<20} {r.mechanism:<12} {_fmt(eps):>8} "
                     f"{r.delta:>8.2g} {r.state:<10} {r.coordinator}")
    return "\n".join(lines)


def export_document(ledger: Ledger, budget: Budget | None = None) -> dict[str, Any]:
    """``vfl budget export``: the summary and every run, as JSON-ready data."""
    with ledger._connect() as conn:
        ledger._verify(conn)
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    return {"ledger": str(ledger.path), "schema_version": SCHEMA_VERSION, "party": meta.get("party") or None,
            "entries": int(meta["count"]), "head": meta["head"], "datasets": ledger.summary(budget),
            "runs": [r.to_dict() for r in ledger.runs()]}
