"""A party's lifetime privacy budget: a persistent ledger of what every run spent (issue 23; docs/privacy.md).

Differential privacy composes: ``k`` releases over the same rows are together at most ``(sum eps_i, sum delta_i)``-DP
(basic composition, Dwork & Roth 2014, *The Algorithmic Foundations of Differential Privacy*, Thm. 3.16), and
nothing the party does afterwards gives the spend back. Averaging ``k`` independently noised releases divides the
noise's standard deviation by ``sqrt(k)`` (the repeated-run averaging attack, ``benchmarks/budget_averaging.py``).
A party therefore keeps a ledger of its runs and refuses a plan that would take the composed loss above its
lifetime budget.

Whose budget (issue 29): a budget belongs to the people in the data, not to one version of a table. By default every
run of a party composes with every other (one budget per party, the key ``"default"``), whatever its rows, bounds,
label or ``--id`` subset: a table minus one row, relabelled or restricted to common IDs holds the same people.
Only an operator's explicit declaration, ``--dataset-name NAME``, keeps a separate budget (key ``name:NAME``, recorded
with the files and columns it covered). Ledgers of schema 1 keyed unnamed datasets by a fingerprint of their columns,
bounds, label and row count; those entries are counted against the default budget (:func:`budget_key`), and such a
ledger is upgraded in place to schema 2 on open (one ``migrate`` entry in the chain; older vfl then refuses it
rather than reading its runs under the old keys).

Storage (stdlib :mod:`sqlite3`, one file per party, :func:`default_ledger_path`): an append-only table of entries
(``reserve``, ``complete``, ``abort``) chained by sha256 (each entry's hash covers the previous hash and its own
content; the head is kept in the ``meta`` table with the schema version). Every open and every reservation runs
``PRAGMA integrity_check`` and re-computes the chain; a ledger that cannot be read or fails the check raises
:class:`LedgerError` and is never reset (deleting it is the operator's explicit act). The chain detects corruption
and naive edits, not a forger who recomputes it (no secret key: the ledger protects the party from others, and
its operator is the party).

A reservation runs in one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock): read the history, compose, check
the budget, append, commit. Two processes of the same party serialise on the lock, so they cannot both pass the
check. The reservation is committed before the party sends anything data-dependent and stays counted whatever
happens to the run (completed, aborted, or the process killed: the entry stays ``reserved``). A networked member
first checks a plan read-only (:meth:`Ledger.check`, when the plan arrives) and reserves only once it has verified
its co-parties and before its first data-dependent message (:class:`vfl.privacy.budget_guard.BudgetGuard`).

Composition (:func:`compose`): runs whose accounting object is a Gaussian mechanism (Gaussian DP ``mu``; Dong,
Roth & Su 2022, *Gaussian differential privacy*) or a Laplace mechanism (pure ``epsilon``) are composed with
dp-accounting's privacy-loss-distribution accountant (Google's ``dp_accounting.pld``; Koskela et al. 2020,
Meiser & Mohammadi 2018) at the budget's delta; the result is never above basic composition, which is used alone
when dp-accounting is not installed (``pip install 'vfl[ica]'``) or a run has another accounting object. The
method used is reported with every number.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vfl.exceptions import BudgetError, PrivacyParameterError, VFLError

__all__ = ["LedgerError", "Ledger", "LedgerAccountant", "Budget", "Spend", "Composition",
           "RunRecord", "DatasetKey", "compose", "spend_of_report", "gaussian_spend", "dataset_key",
           "default_ledger_path", "budget_key", "declared_name", "SCHEMA_VERSION", "STATES", "DEFAULT_DELTA",
           "DEFAULT_DATASET"]

#: 2: one default budget per party (unnamed entries of schema 1, keyed by a fingerprint, count against it)
SCHEMA_VERSION = 2
#: the budget of every run without a declared dataset name (issue 29)
DEFAULT_DATASET = "default"
STATES = ("reserved", "completed", "aborted")
#: delta of a budget given without one (``--budget 2`` means (2, 1e-5))
DEFAULT_DELTA = 1e-5
#: rounding slack of the budget comparison (PLD and float sums)
_SLACK = 1e-9
_GENESIS = "0" * 64


class LedgerError(VFLError):
    """The privacy ledger cannot be read, fails its integrity check, or is used inconsistently."""


def default_ledger_path(party: str) -> Path:
    """``ledger-PARTY.sqlite`` in ``$VFL_LEDGER`` (a directory) if set, else in the user's data directory:
    ``$XDG_DATA_HOME/vfl`` or ``~/.local/share/vfl`` (Linux), ``~/Library/Application Support/vfl`` (macOS),
    ``%LOCALAPPDATA%\\vfl`` (Windows)."""
    env = os.environ.get("VFL_LEDGER")
    if env:
        folder = Path(env).expanduser()
    elif sys.platform == "darwin":
        folder = Path.home() / "Library" / "Application Support" / "vfl"
    elif sys.platform.startswith("win"):
        folder = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "vfl"
    else:
        folder = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "vfl"
    return folder / f"ledger-{party}.sqlite"


# ---------------------------------------------------------------------------------------------- what a run spends
@dataclass(frozen=True)
class Budget:
    """A lifetime budget ``(epsilon, delta)`` per dataset; ``parse("1.5")`` or ``parse("1.5,1e-6")``."""

    epsilon: float
    delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise PrivacyParameterError(f"budget epsilon must be finite and > 0, got {self.epsilon!r}")
        if not (0 < self.delta < 1):
            raise PrivacyParameterError(f"budget delta must be in (0, 1), got {self.delta!r}")

    @classmethod
    def parse(cls, text: str | float | Sequence[float]) -> Budget:
        """``EPSILON[,DELTA]`` (a string, a number or a pair, e.g. from a party config)."""
        if isinstance(text, (int, float)):
            return cls(float(text))
        parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
        try:
            values = [float(p) for p in parts]
        except (TypeError, ValueError):
            raise PrivacyParameterError(f"budget must be EPSILON[,DELTA], got {text!r}") from None
        if len(values) not in (1, 2):
            raise PrivacyParameterError(f"budget must be EPSILON[,DELTA], got {text!r}")
        return cls(*values)


@dataclass(frozen=True)
class Spend:
    """What one run spends: its mechanism, true ``(epsilon, delta)`` and the accounting object that composes it:
    ``{"kind": "gaussian", "mu": mu}``, ``{"kind": "laplace", "epsilon": eps}``, ``{"kind": "approx", "epsilon",
    "delta"}`` or ``{"kind": "non-private"}`` (no calibrated noise: epsilon infinite)."""

    mechanism: str
    epsilon: float
    delta: float
    accounting: dict[str, Any] = field(default_factory=dict)

    @property
    def private(self) -> bool:
        return self.accounting.get("kind") != "non-private" and math.isfinite(self.epsilon)


def spend_of_report(report: Any) -> Spend:
    """The spend of a release from its privacy report (:class:`vfl.privacy.accounting.PrivacyReport`): the true
    epsilon (never the claimed one) and, for Gaussian mechanisms, the Gaussian-DP ``mu`` of the whole release."""
    eps = report.epsilon
    delta = float(report.delta or 0.0)
    if eps is None or not math.isfinite(float(eps)):
        return Spend(report.mechanism, math.inf, delta, {"kind": "non-private"})
    eps = float(eps)
    mu = (report.extra or {}).get("mu")
    if mu is not None and math.isfinite(float(mu)):
        return Spend(report.mechanism, eps, delta, {"kind": "gaussian", "mu": float(mu)})
    if delta == 0.0:
        return Spend(report.mechanism, eps, 0.0, {"kind": "laplace", "epsilon": eps})
    return Spend(report.mechanism, eps, delta, {"kind": "approx", "epsilon": eps, "delta": delta})


def gaussian_spend(mechanism: str, epsilon: float, delta: float, mu: float | None) -> Spend:
    """The spend of a Gaussian release given its true ``epsilon`` at ``delta`` and its Gaussian-DP ``mu`` (a CAPE
    site's whole plan: capeFM's one round, capePCA + every planned capeDJICA round); ``mu`` None or ``epsilon``
    infinite: no calibrated noise (a test mode), which no budget covers."""
    if mu is None or not math.isfinite(float(epsilon)) or not math.isfinite(float(mu)):
        return Spend(mechanism, math.inf, float(delta), {"kind": "non-private"})
    return Spend(mechanism, float(epsilon), float(delta), {"kind": "gaussian", "mu": float(mu)})


@dataclass(frozen=True)
class Composition:
    """The composed ``epsilon`` at ``delta`` of a history and the ``method`` that gave it."""

    epsilon: float
    delta: float
    method: str
    runs: int


def _basic(spends: Sequence[Spend], delta: float) -> float:
    eps = math.fsum(s.epsilon for s in spends)
    return eps if math.fsum(s.delta for s in spends) <= delta + 1e-15 else math.inf


def _pld(spends: Sequence[Spend], delta: float) -> float | None:
    """dp-accounting's PLD epsilon at ``delta`` (None: library missing or an event it cannot compose here)."""
    try:
        import dp_accounting
        from dp_accounting.pld import pld_privacy_accountant
    except ImportError:   # optional: pip install 'vfl[ica]'
        return None
    counts: dict[tuple[str, float], int] = {}
    for s in spends:
        kind = s.accounting.get("kind")
        if kind == "gaussian" and s.accounting["mu"] > 0:
            key = ("gaussian", float(s.accounting["mu"]))
        elif kind == "laplace" and s.accounting["epsilon"] > 0:
            key = ("laplace", float(s.accounting["epsilon"]))
        elif kind in ("gaussian", "laplace"):
            continue   # zero loss
        else:
            return None
        counts[key] = counts.get(key, 0) + 1
    acc = pld_privacy_accountant.PLDAccountant()
    for (kind, value), n in counts.items():
        event = (dp_accounting.GaussianDpEvent(noise_multiplier=1.0 / value) if kind == "gaussian"
                 else dp_accounting.LaplaceDpEvent(noise_multiplier=1.0 / value))
        acc.compose(event, n)
    return float(acc.get_epsilon(delta))


def compose(spends: Sequence[Spend], delta: float) -> Composition:
    """Composed epsilon at ``delta`` of ``spends``: min(basic composition (valid only if the deltas sum to at most
    ``delta``), dp-accounting's PLD accountant (Gaussian and Laplace runs)). ``inf`` if a run was not private."""
    spends = list(spends)
    if not spends:
        return Composition(0.0, delta, "none (no runs)", 0)
    if any(not s.private for s in spends):
        return Composition(math.inf, delta, "a run without calibrated noise (no finite epsilon)", len(spends))
    basic = _basic(spends, delta)
    pld = _pld(spends, delta)
    if pld is not None and pld < basic:
        return Composition(pld, delta, "privacy loss distributions (dp-accounting PLD)", len(spends))
    return Composition(basic, delta, "basic (sum of epsilons and deltas)", len(spends))


# ---------------------------------------------------------------------------------------------- datasets and runs
@dataclass(frozen=True)
class DatasetKey:
    """A run's budget: its declared ``name`` if any (key ``name:NAME``), else the party's default budget (key
    ``"default"``: every unnamed run of the party composes with every other). ``fingerprint`` (of the table's
    declarations) and ``covers`` (its files, columns, label, rows) are recorded with each run, never keys."""

    fingerprint: str
    name: str | None = None
    covers: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    @property
    def key(self) -> str:
        return f"name:{self.name}" if self.name else DEFAULT_DATASET

    @property
    def label(self) -> str:
        return self.name or f"{DEFAULT_DATASET} (this party's budget)"


def budget_key(stored: str) -> str:
    """The budget an entry's stored key counts against: a declared ``name:NAME`` keeps its own; anything else (the
    default, the ``sha256:`` fingerprint keys of schema 1, and schema 1's ``name:default``, which is what
    ``--dataset-name default`` now declares, :func:`declared_name`) is the party's default budget."""
    if stored.startswith("name:") and declared_name(stored[len("name:"):]) is not None:
        return stored
    return DEFAULT_DATASET


def declared_name(name: str | None) -> str | None:
    """``--dataset-name``: None or ``"default"`` is the party's default budget; an empty name is refused."""
    if name is None:
        return None
    if not str(name).strip():
        raise LedgerError("a declared dataset name must not be empty")
    return None if str(name).strip() == DEFAULT_DATASET else str(name).strip()


def dataset_key(feature_names: Sequence[str], n_rows: int, *, bounds: Any = None, label: str | None = None,
                label_bounds: Sequence[float] | None = None, name: str | None = None,
                files: Sequence[str] = ()) -> DatasetKey:
    """The party's budget (``name``: a declared dataset, else its default budget) with, recorded: sha256 over the
    canonical JSON of the declared column names, their bounds (``ColumnBounds`` or None), the label's name and
    bounds and the row count, and what the run covers (``files``, columns, label, rows)."""
    lower = None if bounds is None else [float(v) for v in bounds.lower]
    upper = None if bounds is None else [float(v) for v in bounds.upper]
    decl = {"features": list(feature_names), "lower": lower, "upper": upper, "label": label,
            "label_bounds": None if label_bounds is None else [float(v) for v in label_bounds], "rows": int(n_rows)}
    covers = {"files": [str(f) for f in files], "columns": list(feature_names), "label": label, "rows": int(n_rows)}
    return DatasetKey(hashlib.sha256(_canonical(decl)).hexdigest(), declared_name(name), covers)


@dataclass
class RunRecord:
    """One run in the ledger (from its entries)."""

    run_id: str
    dataset: str
    fingerprint: str
    dataset_name: str | None
    coordinator: str
    plan_digest: str
    mechanism: str
    epsilon: float
    delta: float
    accounting: dict[str, Any]
    budget: list[float] | None
    started: float
    ended: float | None = None
    state: str = "reserved"
    reason: str | None = None
    #: the files, columns, label and rows the run covered (None: a schema-1 entry) and the key it was stored under
    covers: dict[str, Any] | None = None
    stored_key: str = ""

    @property
    def spend(self) -> Spend:
        return Spend(self.mechanism, self.epsilon, self.delta, self.accounting)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["epsilon"] = None if not math.isfinite(self.epsilon) else self.epsilon
        return out


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _entry_hash(prev: str, seq: int, kind: str, run_id: str, dataset: str, body: str, at: float) -> str:
    content = _canonical({"seq": seq, "kind": kind, "run": run_id, "dataset": dataset, "body": body, "at": at})
    return hashlib.sha256(prev.encode() + b"\n" + content).hexdigest()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, run_id TEXT NOT NULL, dataset TEXT NOT NULL,
    body TEXT NOT NULL, at REAL NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL);
"""


class Ledger:
    """The persistent privacy ledger of one party (module docstring): ``reserve`` before a run's first
    data-dependent message, ``finish`` at its end; ``runs``/``summary`` for ``vfl budget``."""

    def __init__(self, path: str | Path, *, party: str | None = None, create: bool = True) -> None:
        self.path = Path(path).expanduser()
        self.party = party
        #: this object created the file (:meth:`discard_if_unused` may remove it again)
        self.created = False
        if not self.path.exists():
            if not create:
                raise LedgerError(f"no privacy ledger at {self.path}")
            self._create()
        with self._connect() as conn:
            version = self._verify(conn, versions=("1", str(SCHEMA_VERSION)))[1]
        if version == "1":
            self._migrate()

    # ------------------------------------------------------------------ storage and integrity
    def _fail(self, what: str) -> LedgerError:
        return LedgerError(f"privacy ledger {self.path} {what}; it is never reset automatically: restore it from a "
                           "backup, or move it away yourself to start an empty ledger, which forgets every spend "
                           "(docs/privacy.md)")

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=120.0, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 120000")
        except sqlite3.Error as exc:
            raise self._fail(f"cannot be opened ({exc})") from None
        return conn

    def _create(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)
        except FileExistsError:   # another process of this party created it first
            return
        except OSError as exc:
            raise LedgerError(f"cannot create the privacy ledger {self.path}: {exc.strerror or exc}") from None
        self.created = True
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            for key, value in (("schema_version", str(SCHEMA_VERSION)), ("party", self.party or ""),
                               ("created", repr(time.time())), ("head", _GENESIS), ("count", "0")):
                conn.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (key, value))
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _migrate(self) -> None:
        """Schema 1 -> 2 in one transaction: the ``sha256:`` keys of unnamed datasets count against the party's
        default budget from now on (:func:`budget_key`); one ``migrate`` entry records it in the chain."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows, version = self._verify(conn, versions=("1", str(SCHEMA_VERSION)))
                if version == "1":
                    self._append(conn, rows, "migrate", "", DEFAULT_DATASET, {
                        "from": 1, "to": SCHEMA_VERSION, "rule": "entries keyed by a fingerprint (sha256:) count "
                        "against the party's default budget"})
                    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise self._fail(f"cannot be upgraded to schema {SCHEMA_VERSION} ({exc})") from None
        finally:
            conn.close()

    def _verify(self, conn: sqlite3.Connection, versions: Sequence[str] = (str(SCHEMA_VERSION),)
                ) -> tuple[list[tuple], str]:
        """PRAGMA integrity_check, the schema version, the party, and the hash chain; returns the entries and the
        schema version."""
        try:
            check = conn.execute("PRAGMA integrity_check").fetchall()
            if check != [("ok",)]:
                raise self._fail(f"fails SQLite's integrity check ({'; '.join(str(r[0]) for r in check[:3])})")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            rows = conn.execute("SELECT seq, kind, run_id, dataset, body, at, prev, hash FROM entries "
                                "ORDER BY seq").fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._fail(f"cannot be read ({exc})") from None
        if meta.get("schema_version") not in versions:
            raise self._fail(f"has schema version {meta.get('schema_version')!r}, this vfl reads {SCHEMA_VERSION}")
        if self.party and meta.get("party") and meta["party"] != self.party:
            raise LedgerError(f"privacy ledger {self.path} belongs to party {meta['party']!r}, not {self.party!r}")
        prev = _GENESIS
        for i, (seq, kind, run_id, dataset, body, at, stored_prev, stored) in enumerate(rows, start=1):
            if seq != i or stored_prev != prev or _entry_hash(prev, seq, kind, run_id, dataset, body, at) != stored:
                raise self._fail(f"fails its integrity check at entry {seq} (an entry was changed, removed or "
                                 "inserted)")
            prev = stored
        if meta.get("head") != prev or meta.get("count") != str(len(rows)):
            raise self._fail("fails its integrity check (its last entries were removed or its head was changed)")
        return rows, str(meta["schema_version"])

    def _append(self, conn: sqlite3.Connection, rows: list[tuple], kind: str, run_id: str, dataset: str,
                body: Mapping[str, Any]) -> None:
        seq = len(rows) + 1
        prev = rows[-1][7] if rows else _GENESIS
        text = _canonical(dict(body)).decode()
        at = time.time()
        digest = _entry_hash(prev, seq, kind, run_id, dataset, text, at)
        conn.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (seq, kind, run_id, dataset, text, at, prev, digest))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'head'", (digest,))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'count'", (str(seq),))

    @contextmanager
    def _write(self) -> Iterator[tuple[sqlite3.Connection, list]]:
        """One write transaction: ``BEGIN IMMEDIATE`` (the write lock: a concurrent reservation waits for this one),
        the integrity check of every row, then COMMIT, or ROLLBACK on any error; an unwritable file is one line."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn, self._verify(conn)[0]
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise self._fail(f"cannot be written ({exc})") from None
        finally:
            conn.close()

    def discard_if_unused(self) -> bool:
        """Remove the file if this object created it and no entry was ever written (a member that failed before
        its first reservation leaves no empty ledger behind); True if removed."""
        if not self.created or not self.path.exists():
            return False
        try:
            with self._connect() as conn:
                count = dict(conn.execute("SELECT key, value FROM meta").fetchall()).get("count")
        except (sqlite3.DatabaseError, LedgerError):
            return False
        if count != "0":
            return False
        self.path.unlink(missing_ok=True)
        self.created = False
        return True

    # ------------------------------------------------------------------ reservations
    def _compose(self, history: Sequence[RunRecord], dataset: DatasetKey, run_id: str, spend: Spend,
                 budget: Budget | None) -> tuple[Composition, Composition]:
        """(spent before, after) ``spend`` on ``dataset``'s budget, or :class:`BudgetError` over ``budget``."""
        delta = budget.delta if budget is not None else DEFAULT_DELTA
        history = [r for r in history if r.dataset == dataset.key]
        if any(r.run_id == run_id for r in history):
            raise LedgerError(f"run {run_id} is already in the privacy ledger {self.path}")
        before = compose([r.spend for r in history], delta)
        after = compose([*(r.spend for r in history), spend], delta)
        if budget is not None and after.epsilon > budget.epsilon + _SLACK:
            raise BudgetError(refusal_line(dataset, budget, before, after, spend))
        return before, after

    def check(self, dataset: DatasetKey, run_id: str, spend: Spend, *, budget: Budget | None
              ) -> tuple[Composition, Composition]:
        """Read-only: what :meth:`reserve` would compose, or its :class:`BudgetError`; records nothing (a plan
        refused here, or never reserved, costs nothing)."""
        return self._compose(self.runs(), dataset, run_id, spend, budget)

    def reserve(self, dataset: DatasetKey, run_id: str, spend: Spend, *, budget: Budget | None,
                coordinator: str = "", plan_digest: str = "") -> tuple[Composition, Composition]:
        """Compose ``spend`` with the dataset's history and, if ``budget`` allows it, record it as ``reserved`` in
        one committed ``BEGIN IMMEDIATE`` transaction. Returns (spent before, spent after); raises
        :class:`BudgetError` (one line: spent, requested, left) when the budget would be exceeded."""
        with self._write() as (conn, rows):
            before, after = self._compose(_records(rows), dataset, run_id, spend, budget)
            body = {"fingerprint": dataset.fingerprint, "dataset_name": dataset.name,
                    "covers": None if dataset.covers is None else dict(dataset.covers),
                    "coordinator": coordinator, "plan_digest": plan_digest, "mechanism": spend.mechanism,
                    "epsilon": spend.epsilon if math.isfinite(spend.epsilon) else None, "delta": spend.delta,
                    "accounting": spend.accounting,
                    "budget": None if budget is None else [budget.epsilon, budget.delta]}
            self._append(conn, rows, "reserve", run_id, dataset.key, body)
        return before, after

    def finish(self, run_id: str, state: str, reason: str | None = None) -> None:
        """Mark a reserved run ``completed`` or ``aborted`` (its spend stays counted either way)."""
        if state not in ("completed", "aborted"):
            raise LedgerError(f"a run ends completed or aborted, not {state!r}")
        with self._write() as (conn, rows):
            match = [r for r in _records(rows) if r.run_id == run_id]
            if not match:
                raise LedgerError(f"run {run_id} is not in the privacy ledger {self.path}")
            self._append(conn, rows, "complete" if state == "completed" else "abort", run_id,
                         match[0].dataset, {"reason": (reason or "")[:500]})

    # ------------------------------------------------------------------ reading
    def runs(self, dataset: str | None = None) -> list[RunRecord]:
        """Every run (of one dataset key), oldest first."""
        with self._connect() as conn:
            rows = self._verify(conn)[0]
        return [r for r in _records(rows) if dataset is None or r.dataset == dataset]

    def summary(self, budget: Budget | None = None) -> list[dict[str, Any]]:
        """Per dataset: runs by state, composed spend and what is left of ``budget`` (default: the budget in force
        at the dataset's latest reservation)."""
        out = []
        runs = self.runs()
        for key in dict.fromkeys(r.dataset for r in runs):
            mine = [r for r in runs if r.dataset == key]
            b = budget
            if b is None and mine[-1].budget is not None:
                b = Budget(*mine[-1].budget)
            comp = compose([r.spend for r in mine], b.delta if b else DEFAULT_DELTA)
            out.append({"dataset": key, "name": key[len("name:"):] if key.startswith("name:") else key,
                        "fingerprint": mine[-1].fingerprint, "covers": _covers(mine),
                        "runs": len(mine), **{s: sum(r.state == s for r in mine) for s in STATES},
                        "spent_epsilon": _num(comp.epsilon), "delta": comp.delta, "composition": comp.method,
                        "budget": None if b is None else [b.epsilon, b.delta],
                        "left_epsilon": None if b is None else _num(max(0.0, b.epsilon - comp.epsilon))})
        return out


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _covers(runs: Sequence[RunRecord]) -> dict[str, Any]:
    """What a budget's runs covered: every file, column, label and row count seen, and how many runs were stored
    under a schema-1 fingerprint key (their files and columns were not recorded)."""
    seen: dict[str, list] = {"files": [], "columns": [], "labels": [], "rows": []}
    for r in runs:
        c = r.covers or {}
        for what, values in (("files", c.get("files") or []), ("columns", c.get("columns") or []),
                             ("labels", [c["label"]] if c.get("label") else []),
                             ("rows", [c["rows"]] if c.get("rows") is not None else [])):
            seen[what] += [v for v in values if v not in seen[what]]
    return {**seen, "unrecorded_runs": sum(r.covers is None for r in runs),
            "fingerprint_keyed_runs": sum(r.stored_key.startswith("sha256:") for r in runs)}


def refusal_line(dataset: DatasetKey, budget: Budget, before: Composition, after: Composition, spend: Spend, *,
                 refused: str = "plan refused before any data-dependent message") -> str:
    """The one line of a refused plan: spent, requested, left."""
    left = max(0.0, budget.epsilon - before.epsilon)
    return (f"privacy budget of dataset {dataset.label} exceeded: spent epsilon {before.epsilon:.4g} in "
            f"{before.runs} run(s), "
            f"this plan requests {spend.epsilon:.4g} ({spend.mechanism}; {after.epsilon:.4g} composed), "
            f"left {left:.4g} of {budget.epsilon:g} at delta {budget.delta:g} (composition: {after.method}); "
            f"{refused}")


def _records(rows: Iterable[tuple]) -> list[RunRecord]:
    """Runs from the entries: a ``reserve`` opens a run, ``complete``/``abort`` ends it."""
    runs: dict[str, RunRecord] = {}
    for _seq, kind, run_id, dataset, body_text, at, _prev, _hash in rows:
        body = json.loads(body_text)
        if kind == "reserve":
            eps = body.get("epsilon")
            runs[run_id] = RunRecord(run_id, budget_key(dataset), body["fingerprint"], body.get("dataset_name"),
                                     body.get("coordinator", ""), body.get("plan_digest", ""), body["mechanism"],
                                     math.inf if eps is None else float(eps), float(body["delta"]),
                                     body.get("accounting", {}), body.get("budget"), at,
                                     covers=body.get("covers"), stored_key=dataset)
        elif run_id in runs:
            runs[run_id].state = "completed" if kind == "complete" else "aborted"
            runs[run_id].ended = at
            runs[run_id].reason = body.get("reason") or None
    return list(runs.values())


# ---------------------------------------------------------------------------------------------- estimators
class LedgerAccountant:
    """A diffprivlib-style accountant (``check``, ``spend``, ``remaining``, ``total``) backed by a persistent
    :class:`Ledger`, for the in-process estimators' ``accountant=``: their fits of one dataset (``dataset``: the
    name the budget is kept under; ``"default"``: the party's default budget) then share the lifetime budget of the
    party's networked runs of that name and survive the process. A fit gives only its ``(epsilon, delta)``, so fits
    compose with basic composition; each fit is one ``completed`` run in the ledger."""

    def __init__(self, ledger: Ledger | str | Path, dataset: str, budget: Budget | str | float) -> None:
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.key = DatasetKey(hashlib.sha256(str(dataset).encode()).hexdigest(), declared_name(str(dataset)))
        self.budget = budget if isinstance(budget, Budget) else Budget.parse(budget)

    @staticmethod
    def _spend(epsilon: float, delta: float) -> Spend:
        epsilon, delta = float(epsilon), float(delta)
        if delta == 0.0:
            return Spend("fit", epsilon, 0.0, {"kind": "laplace", "epsilon": epsilon})
        return Spend("fit", epsilon, delta, {"kind": "approx", "epsilon": epsilon, "delta": delta})

    def total(self) -> tuple[float, float]:
        """The composed ``(epsilon, delta)`` spent on this dataset so far."""
        comp = compose([r.spend for r in self.ledger.runs(self.key.key)], self.budget.delta)
        return comp.epsilon, comp.delta

    def check(self, epsilon: float, delta: float) -> bool:
        """True if one more spend of ``(epsilon, delta)`` fits; else :class:`BudgetError` (spent, requested, left)."""
        history = [r.spend for r in self.ledger.runs(self.key.key)]
        before = compose(history, self.budget.delta)
        after = compose([*history, self._spend(epsilon, delta)], self.budget.delta)
        if after.epsilon > self.budget.epsilon + _SLACK:
            raise BudgetError(refusal_line(self.key, self.budget, before, after, self._spend(epsilon, delta),
                                           refused="fit refused before it touches the data"))
        return True

    def spend(self, epsilon: float, delta: float) -> LedgerAccountant:
        """Check and record one fit (one committed transaction), marked completed."""
        run = "fit-" + hashlib.sha256(os.urandom(16)).hexdigest()[:24]
        self.ledger.reserve(self.key, run, self._spend(epsilon, delta), budget=self.budget)
        self.ledger.finish(run, "completed")
        return self

    def remaining(self, k: int = 1) -> tuple[float, float]:
        """``(epsilon, delta)`` each of ``k`` further equal fits may use (basic composition of what is left)."""
        if int(k) != k or k < 1:
            raise PrivacyParameterError(f"k must be a positive integer, got {k!r}")
        spent = self.total()[0]
        return max(0.0, (self.budget.epsilon - spent) / k), self.budget.delta / k
