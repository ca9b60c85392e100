"""One declaration per message (vfl.net.message_specs): the codec, the typed bodies, the CAPE drivers and the docs
table all agree with the MessageSpecs (issue 30)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from vfl.exceptions import ProtocolError
from vfl.net import message_specs
from vfl.net.message_specs import CAPE_ROUND_TYPES, SPEC, SPECS, MessageType
from vfl.net.messages import FRAME_KINDS, SCHEMAS, IntArray, Message, decode, encode, message_of
from vfl.protocols.cape_aggregation import KINDS, CapeMessage
from vfl.protocols.contracts import Out, PlanBody, PlanParty, ReadyBody, RegisterBody

RUNTIME_MD = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"


def test_every_type_has_exactly_one_spec_and_the_codec_tables_are_derived_from_them():
    assert len(SPECS) == len(MessageType) and {s.type for s in SPECS} == set(MessageType)
    for t in MessageType:
        assert SCHEMAS[t] is SPEC[t].fields
        assert FRAME_KINDS.get(t) == SPEC[t].frames
        assert SPEC[t].doc and SPEC[t].sender and SPEC[t].receiver


def test_the_codec_enforces_the_declared_fields_and_frame_kinds():
    """For every spec: an unknown field and a missing required field are refused, and a frame kind the spec does
    not allow is refused before any payload is parsed."""
    for spec in SPECS:
        with pytest.raises(ProtocolError, match="unexpected field"):
            encode(Message(spec.type, {"not_declared": 1}))
        required = [k for k, (req, _) in spec.fields.items() if req]
        if required:
            with pytest.raises(ProtocolError, match=f"missing field '{required[0]}'"):
                encode(Message(spec.type, {}))
        if spec.frames is not None and not required and ("ints",) not in spec.frames:
            share = encode(Message(MessageType.SHARE, {"block": "b"}, [IntArray.of([1])]))
            header = share[0].replace(b'"type":"share"', f'"type":"{spec.type.value}"'.encode())
            header = header.replace(b'"body":{"block":"b"}', b'"body":{}')
            with pytest.raises(ProtocolError, match="may not carry frames"):
                decode([header, share[1]])


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("body, typed", [
    (RegisterBody(name="alice", n_rows=3, features=["x"], label_owner=True, order=0, label="y",
                  preprocessing={"inputs": ["x"], "categories": {}, "impute": {}}), RegisterBody),
    (PlanBody(index=0, parties=[PlanParty(name="alice", n_features=2, features=["x"], label_owner=True,
                                          intercept=True)], model="linear", mechanism="fm", params={},
              n_samples=3, label_owner=0), PlanBody),
    (ReadyBody(seeded=True, bounds=[[0.0, 1.0]], bounds_from_data=True, label_bounds=[0.0, 2.0],
               label_bounds_from_data=True), ReadyBody),
])
def test_typed_bodies_match_their_spec(body, typed):
    """The typed body of a spec writes only declared fields, every required one, and passes the codec."""
    spec = next(s for s in SPECS if s.body is typed)
    wire = body.to_body()
    assert set(wire) <= set(spec.fields)
    assert {k for k, (req, _) in spec.fields.items() if req} <= set(wire)
    assert {k for k, (req, _) in spec.fields.items() if req} <= _field_names(typed)
    assert decode(encode(Message(spec.type, wire))).body == wire


def test_only_register_plan_and_ready_have_typed_bodies():
    assert {s.type for s in SPECS if s.body is not None} == {MessageType.REGISTER, MessageType.PLAN,
                                                              MessageType.READY}


def test_cape_messages_are_outs_and_cover_the_cape_round_types():
    msg = CapeMessage("masked", 2, {"round": 7}, np.arange(3, dtype=np.uint64))
    assert isinstance(msg, Out) and msg.type == MessageType.CAPE_MASKED and msg.to == 2 == msg.site
    assert {MessageType(f"cape_{k}") for k in KINDS if k != "plan"} == set(CAPE_ROUND_TYPES)
    received = decode(encode(message_of(msg)))
    back = CapeMessage.received(received, 2)
    assert back.kind == "masked" and back.body == {"round": 7} and np.array_equal(back.array, msg.array)


def test_a_cape_message_encodes_to_the_bytes_of_the_old_translation():
    """The bytes the retired vfl/net/cape_wire.py produced: type, body {"round"} + the DH signatures, one frame."""
    table = np.zeros((2, 256), dtype=np.uint8)
    out = CapeMessage("keys", 1, {"round": 5, "auths": ["ab" * 64, None]}, table)
    expected = Message(MessageType.CAPE_KEYS, {"round": 5, "auths": ["ab" * 64, None]}, [table])
    assert encode(message_of(out)) == encode(expected)


def test_a_plan_is_not_a_cape_round_message():
    plan = Message(MessageType.CAPE_PLAN, {"index": 0, "plan": {}})
    with pytest.raises(ProtocolError, match="not a CAPE round message"):
        CapeMessage.received(plan, 0)


def test_the_docs_table_is_generated_from_the_specs():
    text = RUNTIME_MD.read_text(encoding="utf-8")
    assert message_specs.docs_block() in text, "run `python -m vfl.net.message_specs --write`"


def test_the_docs_name_every_type_and_invent_none():
    text = RUNTIME_MD.read_text(encoding="utf-8")
    block = text[text.index(message_specs.DOCS_BEGIN):text.index(message_specs.DOCS_END)]
    listed = re.findall(r"^\| [A-Za-z]+ \| ([A-Z_]+) \|", block, flags=re.M)
    assert listed == [s.type.name for s in sorted(SPECS, key=lambda s: message_specs.FAMILIES.index(s.family))]
    # the hand-written step table of the vertical run names real types only
    steps = text[text.index("| step | message |"):text.index("### Every message type")]
    named = set(re.findall(r"\b[A-Z][A-Z]+(?:_[A-Z]+)+\b|\b(?:REGISTER|WELCOME|PLAN|ROSTER|READY|BLOCK|CREDIT|SHARE|"
                           r"RESULT|ABORT|HEARTBEAT|ERROR)\b", steps))
    assert named and named <= {t.name for t in MessageType}, named - {t.name for t in MessageType}
