"""Typed contracts shared by the protocol phases and the roles: outgoing messages and the REGISTER / PLAN / READY
bodies, each parsed and validated once.

The wire format (JSON header + raw frames, :mod:`vfl.net.messages`) is unchanged: ``to_body`` returns exactly the
dict that travels in the header and ``from_body`` takes the body the transport has already checked against its
schema (field names and JSON types), so only the cross-field rules are checked here. Protocol phases sit below
:mod:`vfl.net` and never import it: they name message types by their wire value (``"block"``, a
:class:`vfl.net.messages.MessageType` is a ``str`` enum and compares equal to it) and return :class:`Out`
records, which the roles turn into :class:`vfl.net.messages.Message` objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from vfl.exceptions import ConfigurationError, ProtocolError

__all__ = ["Out", "Incoming", "kind_of", "RegisterBody", "Registration", "PlanParty", "PlanBody", "ReadyBody"]


@dataclass(frozen=True, kw_only=True)
class Out:
    """A message a protocol side wants sent: wire type (a ``MessageType`` value), body, payload frames and, on the
    coordinator side, the index of the party it goes to (``None`` on the party side: to the coordinator)."""

    type: str
    body: dict = field(default_factory=dict)
    payload: list = field(default_factory=list)
    to: int | None = None


class Incoming(Protocol):
    """What a protocol side reads from a received message (a decoded :class:`vfl.net.messages.Message`)."""

    type: Any
    body: dict
    payload: list

    def array(self, i: int = 0) -> np.ndarray: ...

    def ints(self, i: int = 0) -> np.ndarray: ...

    def blob(self, i: int = 0) -> bytes: ...


def kind_of(msg: Incoming) -> str:
    """The wire value of a message's type (``MessageType.BLOCK`` -> ``"block"``)."""
    return str(getattr(msg.type, "value", msg.type))


@dataclass(frozen=True, kw_only=True)
class RegisterBody:
    """REGISTER: what a party declares about itself (all public)."""

    name: str
    n_rows: int
    features: list[str]
    label_owner: bool
    row_ids: bool = False    # aligns its rows by PSI of row IDs (vfl.protocols.alignment); n_rows counts its IDs
    order: int | None = None
    label: str | None = None            # the label owner's label column name (recorded in the model file)
    #: the declared preprocessing of its columns (vfl.data.preprocessing.Preprocessing.to_record; public)
    preprocessing: dict | None = None

    def __post_init__(self) -> None:
        # column names are shown to operators (the coordinator's coefficient table, `vfl report`): printable text
        # only, refused here at the party that reads them, and as wire input at the hub (vfl.net.message_specs)
        bad = [f for f in [*self.features, self.label or ""] if not (isinstance(f, str) and f.isprintable())]
        if bad:
            raise ConfigurationError(f"column name {ascii(bad[0])} holds a character that is not printable (an "
                                     "escape code, a line break or a bidirectional override); rename the column")

    def to_body(self) -> dict:
        body: dict[str, Any] = {"name": self.name, "n_rows": self.n_rows, "features": list(self.features),
                                "label_owner": self.label_owner, "row_ids": self.row_ids}
        if self.order is not None:
            body["order"] = int(self.order)
        if self.label is not None:
            body["label"] = self.label
        if self.preprocessing is not None:
            body["preprocessing"] = self.preprocessing
        return body

    @classmethod
    def from_body(cls, body: dict, sender: str) -> RegisterBody:
        if body["name"] != sender:
            raise ProtocolError(f"registration name {body['name']!r} differs from the sender {sender!r}")
        preprocessing = body.get("preprocessing")
        if preprocessing is not None:
            from vfl.data.preprocessing import Preprocessing

            try:
                Preprocessing.from_record(preprocessing, body["features"])
            except ValueError as exc:   # ConfigurationError or a malformed value
                raise ProtocolError(f"party {sender}: invalid preprocessing in its registration: {exc}") from None
        label = body.get("label") if body["label_owner"] else None
        return cls(name=body["name"], n_rows=body["n_rows"], features=list(body["features"]),
                   label_owner=body["label_owner"], row_ids=bool(body.get("row_ids", False)),
                   order=body.get("order"), label=label, preprocessing=preprocessing)


@dataclass(kw_only=True)
class Registration:
    """What the coordinator knows of a registered party (all public): its REGISTER and, in FM runs, the public
    column bounds of its READY."""

    peer: bytes
    name: str
    n_rows: int
    features: list[str]
    label_owner: bool
    row_ids: bool = False
    order: int | None = None
    bounds: list[list[float]] | None = None
    label_bounds: list[float] | None = None
    bounds_from_data: bool = False
    label: str | None = None
    preprocessing: dict | None = None

    @classmethod
    def of(cls, peer: bytes, reg: RegisterBody) -> Registration:
        return cls(peer=peer, name=reg.name, n_rows=reg.n_rows, features=list(reg.features),
                   label_owner=reg.label_owner, row_ids=reg.row_ids, order=reg.order, label=reg.label,
                   preprocessing=reg.preprocessing)


@dataclass(frozen=True, kw_only=True)
class PlanParty:
    """One party as the PLAN describes it (``n_features`` counts the public intercept column, if it has it)."""

    name: str
    n_features: int
    features: list[str]
    label_owner: bool
    intercept: bool = False

    def to_body(self) -> dict:
        return {"name": self.name, "n_features": self.n_features, "features": list(self.features),
                "label_owner": self.label_owner, "intercept": self.intercept}


@dataclass(frozen=True, kw_only=True)
class PlanBody:
    """PLAN: the party order, model, mechanism, the protocol's public parameters and the addressee's index."""

    index: int
    parties: list[PlanParty]
    model: str
    mechanism: str
    params: dict
    n_samples: int
    label_owner: int

    def to_body(self) -> dict:
        return {"index": self.index, "parties": [p.to_body() for p in self.parties], "model": self.model,
                "mechanism": self.mechanism, "params": self.params, "n_samples": self.n_samples,
                "label_owner": self.label_owner}

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parties]

    @property
    def me(self) -> PlanParty:
        return self.parties[self.index]

    @classmethod
    def from_body(cls, body: dict) -> PlanBody:
        try:
            parties = [PlanParty(name=str(p["name"]), n_features=int(p["n_features"]),
                                 features=[str(f) for f in p.get("features", [])],
                                 label_owner=bool(p.get("label_owner", False)),
                                 intercept=bool(p.get("intercept", False)))
                       for p in body["parties"]]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed plan: {exc!r}") from None
        bad = [f for p in parties for f in p.features if not f.isprintable()]
        if bad:   # they end up in this party's model file and `vfl report`'s table (review6)
            raise ProtocolError(f"malformed plan: column name {ascii(bad[0])[:80]} is not printable text")
        index, owner = int(body["index"]), int(body["label_owner"])
        if not (0 <= index < len(parties) and 0 <= owner < len(parties)):
            raise ProtocolError(f"malformed plan: index {index} / label owner {owner} of {len(parties)} parties")
        return cls(index=index, parties=parties, model=str(body["model"]), mechanism=str(body["mechanism"]),
                   params=dict(body["params"]), n_samples=int(body["n_samples"]), label_owner=owner)


def _finite_pair(p: Any) -> bool:
    return (isinstance(p, list) and len(p) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in p)
            and p[0] < p[1])


@dataclass(frozen=True, kw_only=True)
class ReadyBody:
    """READY: the party has prepared its data. FM runs: its public column bounds (if it has columns) and, from the
    label owner of a linear model, the public label bounds; both flagged when they were taken from the data."""

    seeded: bool = False
    bounds: list[list[float]] | None = None
    bounds_from_data: bool = False
    label_bounds: Any = None          # checked where it is used (linear FM runs): see :meth:`checked_label_bounds`
    label_bounds_from_data: bool = False

    def to_body(self) -> dict:
        body: dict[str, Any] = {"seeded": self.seeded}
        if self.bounds is not None:
            body["bounds"] = {"pairs": self.bounds}
            body["bounds_from_data"] = self.bounds_from_data
        if self.label_bounds is not None:
            body["label_bounds"] = list(self.label_bounds)
            body["label_bounds_from_data"] = self.label_bounds_from_data
        return body

    @classmethod
    def from_body(cls, body: dict, *, party: str = "", n_features: int | None = None) -> ReadyBody:
        """Parse a READY; with ``n_features`` (FM runs) a party with columns must send one valid pair per column."""
        bounds = None
        if n_features:
            raw = body.get("bounds")
            pairs = raw.get("pairs") if isinstance(raw, dict) else None
            if not (isinstance(pairs, list) and len(pairs) == n_features and all(_finite_pair(p) for p in pairs)):
                raise ProtocolError(f"party {party} sent invalid bounds")
            bounds = [[float(lo), float(hi)] for lo, hi in pairs]
        return cls(seeded=bool(body.get("seeded", False)), bounds=bounds,
                   bounds_from_data=bool(body.get("bounds_from_data", False)) if bounds is not None else False,
                   label_bounds=body.get("label_bounds"),
                   label_bounds_from_data=bool(body.get("label_bounds_from_data", False)))

    def checked_label_bounds(self, owner: str) -> list[float]:
        """The label owner's public (lo, hi) of y, needed to map a linear model back to label units."""
        lb = self.label_bounds
        if not (isinstance(lb, list) and len(lb) == 2 and float(lb[0]) < float(lb[1])):
            raise ProtocolError(f"label owner {owner} sent no valid label bounds [lo, hi] with lo < hi")
        return [float(lb[0]), float(lb[1])]
