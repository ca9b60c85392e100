"""The released capePCA + capeDJICA model as JSON (``vfl djica-aggregator --out``; issue 11).

Fields: the header every vfl model file starts with (``format`` :data:`ICA_MODEL_FORMAT`, ``schema_version``
:data:`ICA_SCHEMA_VERSION`, ``vfl_version``, ``created`` in UTC; :class:`vfl.models.modelio.JsonModel`; version 1 files,
``"format": "vfl-cape-djica-1"``, are still read), ``config`` (the public pipeline parameters), ``n_dims`` D,
``components`` V_K (D x K) and ``eigenvalues`` lambda_K of the capePCA release, ``whitening`` M (K x D) and the
public ``radius`` rho, ``unmixing`` W (K x K) and ``bias`` b of capeDJICA, ``n_rounds``, ``n_restarts``,
``converged``, ``learning_rates``, ``sites`` (names in index order), ``run_id`` and the ``privacy_report``
(per-site epsilon of the whole pipeline by GDP composition, the accountants side by side, ``formal_dp`` by the one
rule). Non-finite report values (epsilon = inf without noise) are written as null. The sites' copy (RESULT)
leaves out the D-sized arrays they already hold (``components``, ``whitening``) and the J learning rates, and
carries ``unmixing`` (K x K), ``bias`` and ``eigenvalues`` (K each) as float64 frames (:data:`RESULT_FRAMES`), not
in the JSON header, whose size (at most 256 KiB) then no longer grows with K.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.models.modelio import JsonModel, schema_version_of

__all__ = ["ICA_MODEL_FORMAT", "ICA_SCHEMA_VERSION", "RESULT_FRAMES", "ICAModel", "load_ica_model"]

ICA_MODEL_FORMAT = "vfl-cape-djica"
ICA_SCHEMA_VERSION = 2
_ARRAYS = ("components", "eigenvalues", "whitening", "unmixing", "bias")
RESULT_FRAMES = ("unmixing", "bias", "eigenvalues")  # the RESULT message's frames, in this order


def _json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, np.ndarray):
        return _json_safe(v.tolist())
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


@dataclass
class ICAModel(JsonModel):
    """A released capeDJICA model (see the module docstring); ``transform`` gives the estimated sources."""

    config: dict[str, Any]
    n_dims: int
    components: np.ndarray | None
    eigenvalues: np.ndarray
    whitening: np.ndarray | None
    radius: float
    unmixing: np.ndarray
    bias: np.ndarray
    n_rounds: int
    n_restarts: int
    converged: bool
    learning_rates: list[float]
    privacy_report: dict[str, Any]
    sites: list[str] = field(default_factory=list)
    run_id: str = ""
    created: str | None = ""           # UTC ISO 8601; "" = now (a new model), None = unknown (a version 1 file)
    vfl_version: str | None = ""       # "" = this vfl, None = unknown

    FORMAT = ICA_MODEL_FORMAT
    SCHEMA_VERSION = ICA_SCHEMA_VERSION

    def __post_init__(self) -> None:
        self.stamp()

    @classmethod
    def from_result(cls, result: dict[str, Any], sites: list[str], run_id: str) -> ICAModel:
        """From :meth:`vfl.protocols.cape_djica_rounds.CapeICAAggregator.finish`."""
        return cls(result["config"], int(result["n_dims"]), result["components"], result["eigenvalues"],
                   result["whitening"], float(result["radius"]), result["unmixing"], result["bias"],
                   int(result["n_rounds"]), int(result["n_restarts"]), bool(result["converged"]),
                   [float(v) for v in result["learning_rates"]], result["privacy_report"], list(sites), run_id)

    @property
    def unmixing_(self) -> np.ndarray:
        """End-to-end unmixing W M (K x D) (needs the whitening, i.e. the aggregator's copy)."""
        if self.whitening is None:
            raise ConfigurationError("this copy of the model has no whitening matrix (the sites' copy)")
        return self.unmixing @ self.whitening

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Estimated sources W M X (K x n) of raw D x n columns (scaled as at training)."""
        return self.unmixing_ @ np.asarray(X, dtype=float)

    def to_dict(self, *, compact: bool = False) -> dict[str, Any]:
        doc = {**self.header(), "config": self.config, "n_dims": self.n_dims,
               "components": None if compact else self.components, "eigenvalues": self.eigenvalues,
               "whitening": None if compact else self.whitening, "radius": self.radius, "unmixing": self.unmixing,
               "bias": self.bias, "n_rounds": self.n_rounds, "n_restarts": self.n_restarts,
               "converged": self.converged, "learning_rates": [] if compact else self.learning_rates,
               "sites": self.sites, "run_id": self.run_id, "privacy_report": self.privacy_report}
        return _json_safe(doc)  # type: ignore[no-any-return]

    def result_parts(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        """The sites' copy as (header dict, float64 frames): :meth:`to_dict` ``compact`` with the
        :data:`RESULT_FRAMES` arrays set to null in the header and sent as frames instead."""
        doc = self.to_dict(compact=True)
        for k in RESULT_FRAMES:
            doc[k] = None
        frames = [np.ascontiguousarray(getattr(self, k), dtype=np.float64) for k in RESULT_FRAMES]
        return doc, frames

    @classmethod
    def from_result_parts(cls, doc: dict[str, Any], frames: list[Any]) -> ICAModel:
        """Inverse of :meth:`result_parts` (a site parsing RESULT): K from the config, every frame's dtype and shape
        checked (unmixing K x K, bias and eigenvalues K), finite values only."""
        try:
            K = int(doc["config"]["n_components"])
        except (KeyError, TypeError, ValueError):
            raise ConfigurationError("malformed capeDJICA model: no n_components in its config") from None
        shapes = {"unmixing": (K, K), "bias": (K,), "eigenvalues": (K,)}
        if len(frames) != len(RESULT_FRAMES):
            raise ConfigurationError(f"capeDJICA RESULT: expected {len(RESULT_FRAMES)} frames "
                                     f"({', '.join(RESULT_FRAMES)}), got {len(frames)}")
        doc = dict(doc)
        for k, arr in zip(RESULT_FRAMES, frames, strict=True):
            if not (isinstance(arr, np.ndarray) and arr.dtype == np.float64 and arr.shape == shapes[k]):
                raise ConfigurationError(f"capeDJICA RESULT: {k} must be a float64 array of shape {shapes[k]}, got "
                                         f"{getattr(arr, 'dtype', type(arr).__name__)} {getattr(arr, 'shape', '')}")
            if not np.all(np.isfinite(arr)):
                raise ConfigurationError(f"capeDJICA RESULT: {k} contains NaN or infinity")
            doc[k] = arr
        return cls.from_dict(doc)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ICAModel:
        version = schema_version_of(doc, ICA_MODEL_FORMAT, ICA_SCHEMA_VERSION, {"vfl-cape-djica-1": 1})
        stamp = (doc.get("created"), doc.get("vfl_version")) if version >= 2 else (None, None)
        try:
            arrays = {k: None if doc.get(k) is None else np.asarray(doc[k], dtype=float) for k in _ARRAYS}
            return cls(dict(doc["config"]), int(doc["n_dims"]), arrays["components"], arrays["eigenvalues"],
                       arrays["whitening"], float(doc["radius"]), arrays["unmixing"], arrays["bias"],
                       int(doc["n_rounds"]), int(doc["n_restarts"]), bool(doc["converged"]),
                       [float(v) for v in doc["learning_rates"]], dict(doc["privacy_report"]),
                       [str(s) for s in doc.get("sites", [])], str(doc.get("run_id", "")),
                       None if stamp[0] is None else str(stamp[0]), None if stamp[1] is None else str(stamp[1]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"malformed capeDJICA model: {exc}") from None


def load_ica_model(path: str | Path) -> ICAModel:
    """Read a model file written by ``vfl djica-aggregator --out`` / :meth:`ICAModel.to_json`."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigurationError(f"cannot read the model file {path}: {exc}") from None
    return ICAModel.from_dict(doc)
