"""CAPE protocol messages on the wire: :class:`vfl.protocols.cape_aggregation.CapeMessage` <-> :class:`Message`.

One message type per step (``CAPE_KEY`` ... ``CAPE_RELEASE``, :mod:`vfl.net.messages`), body ``{"round"}`` and one
numeric frame whose dtype and shape the protocol objects check again (uint8 public values, uint64 masked words,
float64 releases). The site index is never taken from the wire: the aggregator knows it from the sender's
registration, the site from its plan.
"""

from __future__ import annotations

from vfl.exceptions import ProtocolError
from vfl.net.messages import Message, MessageType
from vfl.protocols.cape_aggregation import CapeMessage

__all__ = ["KIND_TO_TYPE", "TYPE_TO_KIND", "to_wire", "from_wire"]

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


def to_wire(msg: CapeMessage) -> Message:
    """A round message as a wire Message (the plan travels as ``CAPE_PLAN``, built by the aggregator driver)."""
    if msg.kind not in KIND_TO_TYPE or msg.array is None:
        raise ProtocolError(f"cannot send CAPE message {msg.kind!r} without its array")
    return Message(KIND_TO_TYPE[msg.kind], {"round": int(msg.body["round"])}, [msg.array])


def from_wire(msg: Message, site: int) -> CapeMessage:
    """A received CAPE round message as a CapeMessage from/to ``site``."""
    kind = TYPE_TO_KIND.get(msg.type)
    if kind is None:
        raise ProtocolError(f"{msg.type.value} is not a CAPE round message")
    if len(msg.payload) != 1:
        raise ProtocolError(f"{msg.type.value} must carry exactly one frame, got {len(msg.payload)}")
    return CapeMessage(kind, site, {"round": msg.body["round"]}, msg.array(0))
