"""Wire format: round trips of every payload kind, and rejection of every malformed field."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vfl.exceptions import ProtocolError
from vfl.net.messages import (
    PROTOCOL_VERSION,
    IntArray,
    Message,
    MessageType,
    decode,
    encode,
    ints_from_bytes,
    ints_to_bytes,
)


def _register(**over):
    body = {"name": "alice", "n_rows": 10, "features": ["a", "b"], "label_owner": True, "row_ids": False}
    body.update(over)
    return Message(MessageType.REGISTER, body)


def test_round_trip_all_payload_kinds():
    rng = np.random.default_rng(0)
    arr = rng.normal(size=(3, 4))
    big = [0, 1, -1, 2**2048 + 12345, -(2**3000) + 7, 255, -256, -128, 127, 128]
    msg = Message(MessageType.SHARE, {"block": "M[0,1]"}, [IntArray.of(np.array(big, dtype=object).reshape(2, 5))])
    msg.sender, msg.run, msg.seq = "bob", "ab12", 7
    out = decode(encode(msg))
    assert out.type is MessageType.SHARE and out.sender == "bob" and out.run == "ab12" and out.seq == 7
    assert out.ints(0).shape == (2, 5) and out.ints(0).ravel().tolist() == big
    out = decode(encode(Message(MessageType.BLOCK, {"block": "M[0,0]"}, [arr])))
    np.testing.assert_array_equal(out.array(0), arr)
    out = decode(encode(Message(MessageType.BCD_REMAINDER, {"round": 1, "to": "a"}, [np.arange(5)])))
    np.testing.assert_array_equal(out.array(0), np.arange(5))
    out = decode(encode(Message(MessageType.ENC_REQUEST, {"block": "b", "to": "a", "wire": {}}, [b"\x00raw"])))
    assert out.blob(0) == b"\x00raw"
    out = decode(encode(Message(MessageType.ENC_CHUNK, {"block": "b", "to": "a", "wire": {}}, [b""])))
    assert out.blob(0) == b""


def test_signed_big_endian_ints():
    for v in [0, 1, -1, 127, 128, -128, -129, 2**64, -(2**64), 3**500]:
        assert ints_from_bytes(ints_to_bytes([v]), 1) == [v]
    blob = ints_to_bytes([-2])
    assert blob == b"\x00\x00\x00\x01\xfe"  # length 1, two's complement
    with pytest.raises(ProtocolError):
        ints_from_bytes(blob + b"\x00", 1)  # trailing byte
    with pytest.raises(ProtocolError):
        ints_from_bytes(blob, 2)  # truncated
    with pytest.raises(ProtocolError):
        ints_to_bytes([1.5])


def _frames(msg):
    return encode(msg)


def _tamper_header(frames_in, /, **changes):
    frames = frames_in
    header = json.loads(frames[0])
    header.update(changes)
    return [json.dumps(header).encode(), *frames[1:]]


@pytest.mark.parametrize("change", [
    {"v": PROTOCOL_VERSION + 1},
    {"type": "nonsense"},
    {"run": "NOT-HEX"},
    {"from": "bad name with spaces"},
    {"seq": -1},
    {"seq": True},
    {"body": []},
    {"frames": [{"kind": "bytes"}]},
])
def test_header_fields_are_validated(change):
    with pytest.raises(ProtocolError):
        decode(_tamper_header(_frames(_register()), **change))


@pytest.mark.parametrize("body", [
    {"name": "alice"},                                                    # missing fields
    {"name": "a b", "n_rows": 1, "features": [], "label_owner": False},   # bad name
    {"name": "a", "n_rows": 0, "features": [], "label_owner": False},     # zero rows
    {"name": "a", "n_rows": 1.5, "features": [], "label_owner": False},   # float rows
    {"name": "a", "n_rows": 1, "features": [3], "label_owner": False},    # non-string feature
    {"name": "a", "n_rows": 1, "features": [], "label_owner": "yes"},     # non-bool flag
    {"name": "a", "n_rows": 1, "features": [], "label_owner": False, "evil": 1},  # unknown field
    {"name": "a", "n_rows": 1, "features": [], "label_owner": False, "dims": 100_001},  # capeDJICA D too large
])
def test_body_schema(body):
    frames = _frames(_register())
    with pytest.raises(ProtocolError):
        decode(_tamper_header(frames, body=body))
    with pytest.raises(ProtocolError):
        encode(Message(MessageType.REGISTER, body))


def test_register_dims_bound():
    ok = {"name": "a", "n_rows": 1, "features": [], "label_owner": False, "dims": 100_000, "role": "djica-site"}
    assert decode(encode(Message(MessageType.REGISTER, ok))).body["dims"] == 100_000


def test_array_frames_are_checked_against_their_descriptor():
    msg = Message(MessageType.BLOCK, {"block": "M[0,0]"}, [np.ones((2, 2))])
    frames = encode(msg)
    with pytest.raises(ProtocolError, match="bytes"):
        decode([frames[0], frames[1][:-8]])
    header = json.loads(frames[0])
    for desc in [{"kind": "array", "dtype": "|O", "shape": [2, 2]},
                 {"kind": "array", "dtype": "<f8", "shape": [2, -2]},
                 {"kind": "array", "dtype": "<f8", "shape": [1, 1, 1, 1, 4]},
                 {"kind": "pickle"},
                 {"kind": "array", "dtype": "<f8", "shape": [2, 2], "extra": 1}]:
        header["frames"] = [desc]
        with pytest.raises(ProtocolError):
            decode([json.dumps(header).encode(), frames[1]])
    nan = np.array([[np.nan, 0.0], [0.0, 0.0]]).tobytes()
    with pytest.raises(ProtocolError, match="NaN"):
        decode([frames[0], nan])


@pytest.mark.parametrize("frames", [
    [],
    [b"\xff\xfe garbage"],
    [b"[1, 2, 3]"],
    [b'{"v": 1}'],
    [b"NaN"],
    [b"x" * 300_000],
    [b"{}"] * 100,
])
def test_garbage_is_a_protocol_error(frames):
    with pytest.raises(ProtocolError):
        decode(frames)


def test_total_size_limit():
    msg = Message(MessageType.BLOCK, {"block": "M[0,0]"}, [np.zeros(1000)])
    with pytest.raises(ProtocolError, match="limit"):
        decode(encode(msg), max_bytes=4000)
    assert decode(encode(msg), max_bytes=9000).array().shape == (1000,)


def test_object_arrays_need_intarray():
    with pytest.raises(ProtocolError):
        encode(Message(MessageType.SHARE, {"block": "x"}, [np.array([1, 2], dtype=object)]))
