"""The released model: coefficients in original units, JSON export/import, atomic file writes.

A vertically trained model is ``w`` on the *prepared* features: each party maps its raw columns
with its public bounds to [-1, 1] and multiplies by a public column scale s (``vfl.fm.domain``), and a
linear model's label is mapped from its bounds [lo_y, hi_y] to [-1, 1]. Because those maps are
affine and public, the model is also an affine function of the raw columns::

    z(x) = sum_j w_j s_j (2 (x_j - lo_j)/(hi_j - lo_j) - 1)          (prepared scale)
    linear:   y_hat = lo_y + (hi_y - lo_y) (z(x) + 1) / 2  = coef_ . x + intercept_
    logistic: P(y = 1 | x) = sigmoid(z(x)),  z(x) = coef_ . x + intercept_

(BCD/DP-BCD use the data as given: no maps, coef_ = w.) The JSON file (schema version
:data:`SCHEMA_VERSION`, docs/data_preparation.md) holds a header (``format``, ``schema_version``, ``vfl_version``,
``created`` in UTC ISO 8601), the label name, the features and their coefficients keyed by name, the intercept,
``w``, each party's feature names, bounds and declared preprocessing (:mod:`vfl.data.preprocessing`), the
mechanism and the privacy report. Version 1 files (``"format": "vfl-model/1"``) are still read; a file of an
unknown version is refused with one line. Files are written to a temporary name in the target folder, flushed,
fsynced and renamed, so a crash never leaves a partial model file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from vfl.data.files import is_special_file
from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.models.inference import InferenceMixin, InferenceResult
from vfl.secure.identity import canonical_json

__all__ = ["PartyColumns", "FittedModel", "JsonModel", "atomic_write_text", "load_model", "report_text",
           "MODEL_FORMAT", "SCHEMA_VERSION", "schema_version_of", "utc_now"]

MODEL_FORMAT = "vfl-model"
#: the schema version written; readable versions are 1 (``"format": "vfl-model/1"``) and this one
SCHEMA_VERSION = 2


@dataclass
class PartyColumns:
    """One party's columns in the released model (all public)."""

    name: str
    features: list[str]
    bounds: list[list[float]] | None = None  # per column [lo, hi]; None = data used as given
    column_scale: float = 1.0
    label_owner: bool = False
    intercept: bool = False  # this party carried the public constant column (its last prepared column)
    #: the party's declared preprocessing (:meth:`vfl.data.preprocessing.Preprocessing.to_record`): raw input
    #: columns, categories and imputation constants; None = its features are raw columns used as given
    preprocessing: dict[str, Any] | None = None

    @property
    def n_columns(self) -> int:
        """Prepared columns in the protocol: the features plus the constant column if any."""
        return len(self.features) + (1 if self.intercept else 0)

    def affine(self, w_k: np.ndarray) -> tuple[np.ndarray, float]:
        """(coef, intercept) with  w_k . prepared(x_k) = coef . x_k + intercept."""
        w_k = np.asarray(w_k, dtype=float)
        if self.intercept:   # the constant column is column_scale in the prepared domain
            coef, icpt = PartyColumns(self.name, self.features, self.bounds, self.column_scale).affine(w_k[:-1])
            return coef, icpt + float(w_k[-1] * self.column_scale)
        if self.bounds is None:
            return w_k * self.column_scale, 0.0
        b = np.asarray(self.bounds, dtype=float).reshape(-1, 2)
        width = b[:, 1] - b[:, 0]
        ws = w_k * self.column_scale
        return 2.0 * ws / width, float(np.sum(ws * (-1.0 - 2.0 * b[:, 0] / width)))


def utc_now() -> str:
    """The current time in UTC, ISO 8601 to the second (``2026-11-25T12:00:00Z``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _vfl_version() -> str:
    """The installed vfl's version (package metadata; the package face ``vfl.__version__`` is a layer above)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vfl")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown"


def schema_version_of(doc: Any, fmt: str, current: int, legacy: dict[str, int]) -> int:
    """The schema version of a model document of format ``fmt``: ``{"format": fmt, "schema_version": v}`` with
    1 <= v <= ``current``, or a legacy format string (``legacy``: format -> version). Anything else raises one
    :class:`ConfigurationError` line: not a model of this kind, or a version this vfl does not know."""
    if isinstance(doc, dict) and isinstance(doc.get("format"), str) and doc["format"] in legacy:
        return legacy[doc["format"]]
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ConfigurationError(f"not a {fmt} model file")
    version = doc.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= current:
        raise ConfigurationError(f"{fmt} schema version {version!r} is unknown to vfl {_vfl_version()}, which reads "
                                 f"versions 1 to {current} (written by a newer vfl? upgrade vfl to read it)")
    return version


class JsonModel:
    """Model files: :meth:`to_json` writes ``to_dict()`` as JSON (indent 2, no NaN), atomically to ``path``.

    Every model file starts with the same header (:meth:`header`): ``format``, ``schema_version``, the
    ``vfl_version`` that wrote it and its ``created`` time (UTC, ISO 8601); subclasses keep ``created`` and
    ``vfl_version`` as fields (filled in at construction, kept when a file is read back)."""

    FORMAT = ""
    SCHEMA_VERSION = 1
    created: str | None
    vfl_version: str | None

    def stamp(self) -> None:
        """Fill in ``created`` and ``vfl_version`` of a new model (an empty string; None = unknown, kept)."""
        if self.created == "":
            self.created = utc_now()
        if self.vfl_version == "":
            self.vfl_version = _vfl_version()

    def header(self) -> dict[str, Any]:
        return {"format": self.FORMAT, "schema_version": self.SCHEMA_VERSION, "vfl_version": self.vfl_version,
                "created": self.created}

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self, path: str | Path | None = None) -> str:
        """The model as JSON text; written atomically to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False)
        if path is not None:
            atomic_write_text(path, text + "\n")
        return text


@dataclass
class FittedModel(InferenceMixin, JsonModel):
    """A model trained by the vfl protocol (or loaded from JSON); ``bse``, ``pvalues``, ``conf_int(alpha)`` and
    ``summary()`` from its ``inference`` record (:mod:`vfl.models.inference`, computed by the coordinator)."""

    model: str
    mechanism: str
    parties: list[PartyColumns]
    w: np.ndarray
    label_bounds: list[float] | None = None
    privacy_report: dict[str, Any] = field(default_factory=dict)
    n_samples: int = 0
    run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    label_name: str | None = None      # the label column's name (None: not known, e.g. a version 1 file)
    created: str | None = ""           # UTC ISO 8601; "" = now (a new model), None = unknown
    vfl_version: str | None = ""       # the vfl that trained it; "" = this one, None = unknown
    #: the training run's signed roster as the coordinator received it (:meth:`vfl.protocols.roster.
    #: RosterCoordinator.record`: ``{"run", "plan", "entries"}``); None = not recorded (an older file, a CAPE run).
    #: Public: each entry is a party's signed registration (names, feature names, row count) and key fingerprint.
    #: A serving party checks its own entry in it (:func:`vfl.protocols.roster.verify_own_entry`).
    roster: dict[str, Any] | None = None
    #: standard errors, intervals, p-values and fit measures from the release (:meth:`InferenceResult.to_dict`);
    #: None = not computed (an older file, a (DP-)BCD run)
    inference: dict[str, Any] | None = None
    #: party -> Ed25519 signature (hex) over :func:`model_document_digest` of this file without ``signatures``:
    #: each party of the roster signed after re-deriving the coefficients from the run's release
    #: (:mod:`vfl.net.model_check`); None = unsigned (an older file, an ``--insecure-no-identity`` or BCD run)
    signatures: dict[str, str] | None = None
    #: the digest of the document this model was read from (None: built here; :meth:`document_digest`)
    loaded_digest: bytes | None = field(default=None, compare=False, repr=False)

    FORMAT = MODEL_FORMAT
    SCHEMA_VERSION = SCHEMA_VERSION

    def __post_init__(self) -> None:
        self.stamp()
        self.w = np.asarray(self.w, dtype=float)
        d = sum(p.n_columns for p in self.parties)
        if self.w.shape != (d,):
            raise ConfigurationError(f"model has {self.w.size} coefficients for {d} features")
        out = self.original_units(self.w)
        self.coef_ = out[:-1]
        self.intercept_ = float(out[-1])

    def original_units(self, w: np.ndarray) -> np.ndarray:
        """[coef..., intercept] in original units of a model ``w`` on the prepared columns (the public affine maps
        of the parties and, linear, of the label)."""
        w = np.asarray(w, dtype=float)
        coefs, icpt = [], 0.0
        start = 0
        for p in self.parties:
            c, i = p.affine(w[start:start + p.n_columns])
            coefs.append(c)
            icpt += i
            start += p.n_columns
        coef = np.concatenate(coefs) if coefs else np.zeros(0)
        if self.model == "linear" and self.label_bounds is not None:
            lo, hi = self.label_bounds
            half = (hi - lo) / 2.0
            coef, icpt = coef * half, lo + half * (icpt + 1.0)
        return np.append(coef, icpt)

    def _inference(self) -> InferenceResult:
        if self.inference is None:
            raise ConfigurationError("this model has no inference record (a (DP-)BCD run, or a file written before "
                                     "vfl computed inference from the release)")
        return InferenceResult.from_dict(self.inference)

    # ------------------------------------------------------------ sklearn-like
    @property
    def feature_names_(self) -> list[str]:
        return [f for p in self.parties for f in p.features]

    def coefficients(self) -> dict[str, float]:
        """Feature name -> coefficient in original units; a name two parties share is written ``party:feature``."""
        names = self.feature_names_
        keys = [f"{p.name}:{f}" if names.count(f) > 1 else f for p in self.parties for f in p.features]
        return dict(zip(keys, self.coef_.tolist(), strict=True))

    def column_bounds(self) -> np.ndarray:
        """(d, 2) public bounds of the model's columns as recorded (NaN where a party's data were used as given:
        (DP-)BCD); with ``--no-fit-intercept`` the symmetric (-m, m) of the declared bounds."""
        rows = []
        for p in self.parties:
            b = np.full((len(p.features), 2), np.nan) if p.bounds is None else np.asarray(p.bounds, dtype=float)
            rows.append(b.reshape(len(p.features), 2))
        return np.vstack(rows) if rows else np.zeros((0, 2))

    @property
    def privacy_report_(self) -> Any:
        """The privacy report (a :class:`vfl.privacy.accounting.PrivacyReport`; its dict if it cannot be rebuilt)."""
        report = self.privacy_report_object()
        return report if report is not None else self.privacy_report

    def privacy_report_object(self) -> Any:
        from vfl.privacy.accounting import PartyPrivacy, PrivacyReport

        try:
            doc = dict(self.privacy_report)
            doc["parties"] = [PartyPrivacy(**p) for p in doc.get("parties", [])]
            return PrivacyReport(**doc)
        except (TypeError, ValueError):
            return None

    def _stack(self, blocks: Any) -> np.ndarray:
        if isinstance(blocks, (list, tuple)):
            if len(blocks) != len(self.parties):
                raise DataValidationError(f"expected {len(self.parties)} party blocks, got {len(blocks)}")
            parts = [np.asarray(b, dtype=float).reshape(np.asarray(b).shape[0], -1) for b in blocks]
            for p, b in zip(self.parties, parts, strict=True):
                if b.shape[1] != len(p.features):
                    raise DataValidationError(f"party {p.name}: {b.shape[1]} columns, expected {len(p.features)}")
            X = np.hstack(parts) if parts else np.zeros((0, 0))
        else:
            X = np.asarray(blocks, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.coef_.size:
            raise DataValidationError(f"expected {self.coef_.size} columns, got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise DataValidationError("data contain NaN or infinity")
        return X

    def decision_function(self, blocks: Any) -> np.ndarray:
        """coef_ . x + intercept_ for raw rows (a joined array or one block per party, in party order)."""
        return self._stack(blocks) @ self.coef_ + self.intercept_

    def predict_proba(self, blocks: Any) -> np.ndarray:
        if self.model != "logistic":
            raise ConfigurationError("predict_proba is for logistic models")
        return 0.5 * (1.0 + np.tanh(0.5 * self.decision_function(blocks)))

    def predict(self, blocks: Any) -> np.ndarray:
        """Linear: predicted y. Logistic: labels in {0, 1}."""
        z = self.decision_function(blocks)
        return (z >= 0).astype(float) if self.model == "logistic" else z

    def score(self, blocks: Any, y: np.ndarray) -> float:
        """R^2 (linear) or accuracy (logistic)."""
        y = np.asarray(y, dtype=float)
        pred = self.predict(blocks)
        if self.model == "logistic":
            return float(np.mean(pred == y))
        ss_res = float(np.sum((y - pred) ** 2))
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        return 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0

    # ------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """Schema version 2: header, label, features -> coefficients (``coef`` keeps the list), intercept,
        ``w``, the parties' columns, bounds and preprocessing, mechanism, privacy report, extra, and (optional, only
        when recorded) the training run's signed ``roster``."""
        return {
            **self.header(), "model": self.model, "mechanism": self.mechanism, "run_id": self.run_id,
            "n_samples": self.n_samples, "label": self.label_name, "label_bounds": self.label_bounds,
            "features": self.feature_names_, "coefficients": self.coefficients(), "intercept": self.intercept_,
            "coef": self.coef_.tolist(), "w": self.w.tolist(),
            "parties": [{"name": p.name, "features": p.features, "bounds": p.bounds,
                         "column_scale": p.column_scale, "label_owner": p.label_owner,
                         "intercept": p.intercept, "preprocessing": p.preprocessing} for p in self.parties],
            "privacy_report": self.privacy_report, "extra": self.extra,
            **({} if self.roster is None else {"roster": self.roster}),
            **({} if self.inference is None else {"inference": self.inference}),
            **({} if self.signatures is None else {"signatures": self.signatures}),
        }

    def document_digest(self) -> bytes:
        """What every party signs: :func:`model_document_digest` of the file as read (or, for a model built here,
        of :meth:`to_dict`), signatures left out."""
        return self.loaded_digest if self.loaded_digest is not None else model_document_digest(self.to_dict())

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> FittedModel:
        """Read schema version 1 or 2 (:func:`schema_version_of`); a version 2 record of preprocessing is checked
        against the party's feature names."""
        from vfl.data.preprocessing import Preprocessing

        version = schema_version_of(doc, MODEL_FORMAT, SCHEMA_VERSION, {"vfl-model/1": 1})
        try:
            parties = [PartyColumns(str(p["name"]), [str(f) for f in p["features"]], p.get("bounds"),
                                    float(p.get("column_scale", 1.0)), bool(p.get("label_owner", False)),
                                    bool(p.get("intercept", False)), p.get("preprocessing"))
                       for p in doc["parties"]]
            for p in parties:
                if p.preprocessing is not None:
                    Preprocessing.from_record(p.preprocessing, p.features)
            stamp = (None, None) if version == 1 else (doc.get("created"), doc.get("vfl_version"))
            label = doc.get("label") if version >= 2 else None
            return cls(doc["model"], doc["mechanism"], parties, np.asarray(doc["w"], dtype=float),
                       doc.get("label_bounds"), doc.get("privacy_report") or {}, int(doc.get("n_samples", 0)),
                       str(doc.get("run_id", "")), doc.get("extra") or {}, None if label is None else str(label),
                       None if stamp[0] is None else str(stamp[0]), None if stamp[1] is None else str(stamp[1]),
                       _roster_of(doc.get("roster")), _inference_of(doc.get("inference")),
                       _signatures_of(doc.get("signatures")), model_document_digest(doc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigurationError(f"malformed model file: {exc}") from None


def _inference_of(value: Any) -> dict[str, Any] | None:
    """The optional ``inference`` record of a model file: absent/null, or a readable :class:`InferenceResult`."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("its inference record is not an object")
    InferenceResult.from_dict(value)
    return value


def _roster_of(value: Any) -> dict[str, Any] | None:
    """The optional ``roster`` of a model file: absent/null, or ``{"run", "plan", "entries": [...]}``."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("entries"), list):
        raise ValueError("its roster is not {run, plan, entries}")
    return value


def _signatures_of(value: Any) -> dict[str, str] | None:
    """The optional ``signatures`` of a model file: absent/null, or ``{party: signature hex}``."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError("its signatures are not {party: signature}")
    return dict(value)


def model_document_digest(doc: dict[str, Any]) -> bytes:
    """sha256 over ``"vfl model signature\\0"`` and the canonical JSON (sorted keys, no whitespace) of a model
    document without its ``signatures``: coefficients, features, bounds, preprocessing, report, run id, roster."""
    body = {k: v for k, v in doc.items() if k != "signatures"}
    return hashlib.sha256(b"vfl model signature\0" + canonical_json(body)).digest()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: Python keeps the last of duplicate keys (what the signatures cover), other
    readers may keep the first, so a signed file could show them other coefficients (review2)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise json.JSONDecodeError("duplicate key in an object", "", 0)
    return out


def load_model(path: str | Path) -> FittedModel:
    """Read a model JSON file written by :meth:`FittedModel.to_json`."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise ConfigurationError(f"model file {path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"model file {path} is not valid JSON: {exc}") from None
    except IsADirectoryError:
        raise ConfigurationError(f"model file {path} is a directory") from None
    try:
        return FittedModel.from_dict(doc)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{path}: {exc}") from None


def plain_file_mode(target: Path) -> int:
    """The permission bits ``open(target, "w")`` would give: the existing file's, else ``0o666 & ~umask``.

    ``tempfile.mkstemp`` creates files ``0o600``; an atomic write must not silently make a model file unreadable
    to the group that could read the one it replaces.
    """
    try:
        return target.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path`` (POSIX-atomic).

    The file gets the mode a plain write would give (:func:`plain_file_mode`), not mkstemp's ``0o600``. An existing
    target that is not a regular file (``/dev/null``, a FIFO, a terminal) is written in place: renaming over it
    would replace the device itself.
    """
    target = Path(path)
    if is_special_file(target):
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    folder = target.parent if str(target.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, plain_file_mode(target))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def report_text(model: FittedModel) -> str:
    """The model's privacy report as text (rebuilt from its JSON form)."""
    report = model.privacy_report_object()
    return report.to_text() if report is not None else json.dumps(model.privacy_report, indent=2)
