"""CAPE protocol messages on the wire: :class:`vfl.protocols.cape_aggregation.CapeMessage` <-> :class:`Message`.

One message type per step (``CAPE_KEY`` ... ``CAPE_RELEASE``, :mod:`vfl.net.messages`), body ``{"round"}`` (plus the
signatures of the Diffie-Hellman steps, :data:`SIGNATURE_FIELDS`) and one numeric frame whose dtype and shape the
protocol objects check again (uint8 public values, uint64 masked words, float64 releases). The site index is never
taken from the wire: the aggregator knows it from the sender's registration, the site from its plan.
"""

from __future__ import annotations

from vfl.exceptions import ProtocolError
from vfl.net.messages import Message, MessageType
from vfl.protocols.cape_aggregation import CapeMessage

__all__ = ["KIND_TO_TYPE", "TYPE_TO_KIND", "SIGNATURE_FIELDS", "to_wire", "from_wire"]

KIND_TO_TYPE = {
    "key": MessageType.CAPE_KEY,
    "keys": MessageType.CAPE_KEYS,
    "masked": MessageType.CAPE_MASKED,
    "sum": MessageType.CAPE_SUM,
    "release": MessageType.CAPE_RELEASE,
    "subspace": MessageType.CAPE_SUBSPACE,   # capeDJICA (vfl.protocols.cape_djica_rounds)
    "state": MessageType.CAPE_STATE,
}
TYPE_TO_KIND = {v: k for k, v in KIND_TO_TYPE.items()}
#: the signature fields of the Diffie-Hellman steps (vfl.protocols.cape_keys): a ``key`` carries its site's
#: ``auth``, the relayed ``keys`` table every site's signature (``auths``, in index order)
SIGNATURE_FIELDS = {"key": ("auth",), "keys": ("auths",)}


def to_wire(msg: CapeMessage) -> Message:
    """A round message as a wire Message (the plan travels as ``CAPE_PLAN``, built by the aggregator driver)."""
    if msg.kind not in KIND_TO_TYPE or msg.array is None:
        raise ProtocolError(f"cannot send CAPE message {msg.kind!r} without its array")
    body = {"round": int(msg.body["round"])}
    body.update({k: msg.body[k] for k in SIGNATURE_FIELDS.get(msg.kind, ()) if k in msg.body})
    return Message(KIND_TO_TYPE[msg.kind], body, [msg.array])


def from_wire(msg: Message, site: int) -> CapeMessage:
    """A received CAPE round message as a CapeMessage from/to ``site``."""
    kind = TYPE_TO_KIND.get(msg.type)
    if kind is None:
        raise ProtocolError(f"{msg.type.value} is not a CAPE round message")
    if len(msg.payload) != 1:
        raise ProtocolError(f"{msg.type.value} must carry exactly one frame, got {len(msg.payload)}")
    body = {"round": msg.body["round"]}
    body.update({k: msg.body[k] for k in SIGNATURE_FIELDS.get(kind, ()) if k in msg.body})
    return CapeMessage(kind, site, body, msg.array(0))
