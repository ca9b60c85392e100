"""Real ZeroMQ sockets on loopback: round trip, bad frames dropped, size limit, CURVE accept/refuse."""

from __future__ import annotations

import socket
import time

import pytest
import zmq

from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.net.messages import IntArray, Message, MessageType
from vfl.net.transport import (
    ClientTransport,
    ServerTransport,
    load_client_keys,
    load_server_keys,
    write_certificates,
)

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner

RUN = "00ff" * 4


@pytest.fixture
def server():
    s = ServerTransport("tcp://127.0.0.1:0", run_id=RUN, max_message_bytes=1 << 20)
    yield s
    s.close()


def _register(name="alice"):
    return Message(MessageType.REGISTER, {"name": name, "n_rows": 3, "features": ["x"], "label_owner": False})


def test_round_trip(server):
    client = ClientTransport(server.endpoint, name="alice")
    try:
        client.send(_register())
        peer, msg = server.recv(5)
        assert msg.type is MessageType.REGISTER and msg.sender == "alice" and msg.seq == 1
        server.bind_peer(peer, "alice")   # what the coordinator does when it accepts the registration
        server.send(peer, Message(MessageType.WELCOME, {"run": RUN}))
        welcome = client.recv(5)
        assert welcome.type is MessageType.WELCOME and client.run_id == RUN
        client.send(Message(MessageType.SHARE, {"block": "M[0,1]"}, [IntArray.of([2**900, -3])]))
        _, share = server.recv(5)
        assert share.ints().tolist() == [2**900, -3] and share.run == RUN
    finally:
        client.close()


def test_garbage_and_oversized_frames_are_dropped(server):
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.connect(server.endpoint)
    raw.send_multipart([b"\x00\x01garbage", b"more"])
    raw.send_multipart([b'{"v":1,"type":"register"}'])
    raw.send(b"")
    raw.send_multipart([b"x" * (2 << 20)])  # bigger than MAXMSGSIZE: zmq drops the connection
    # a raw TCP client speaking no ZMTP at all
    with socket.create_connection(("127.0.0.1", int(server.endpoint.rsplit(":", 1)[1]))) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)) * 100)
    assert server.recv(1.0) is None
    # 3 malformed zmq messages, plus whatever libzmq's legacy ZMTP/1.0 framing makes of the raw bytes
    assert server.rejected >= 3
    raw.close(linger=0)
    # the server still works for a well-behaved client
    client = ClientTransport(server.endpoint, name="bob")
    try:
        client.send(_register("bob"))
        peer, msg = server.recv(5)
        assert msg.sender == "bob"
    finally:
        client.close()


def test_replayed_sequence_and_wrong_run_are_rejected(server):
    client = ClientTransport(server.endpoint, name="alice")
    try:
        client.send(_register())
        peer, _ = server.recv(5)
        client._seq = 0  # replay seq 1
        client.send(_register())
        client.run_id = "abcd"
        client.send(Message(MessageType.HEARTBEAT))
        assert server.recv(0.5) is None
        assert server.rejected == 2
    finally:
        client.close()


def test_bind_error_is_a_configuration_error(server):
    with pytest.raises(ConfigurationError):
        ServerTransport(server.endpoint, run_id=RUN)


def test_curve_authorised_and_refused(tmp_path):
    keys = tmp_path / "keys"
    write_certificates(keys, ["alice"])
    other = tmp_path / "other"
    write_certificates(other, ["mallory"])
    (other / "coordinator.key").unlink()
    (other / "coordinator.key").write_bytes((keys / "coordinator.key").read_bytes())
    with pytest.raises(ConfigurationError):
        write_certificates(keys, ["alice"])
    server = ServerTransport("tcp://127.0.0.1:0", run_id=RUN, curve=load_server_keys(keys))
    good = ClientTransport(server.endpoint, name="alice", curve=load_client_keys(keys, "alice"))
    bad = ClientTransport(server.endpoint, name="mallory", curve=load_client_keys(other, "mallory"))
    try:
        good.send(_register("alice"))
        bad.send(_register("mallory"))
        peer, msg = server.recv(5)
        assert msg.sender == "alice"
        assert server.recv(1.0) is None  # mallory's message never arrives
        with pytest.raises(ProtocolError, match="CURVE"):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                bad.recv(0.2)
        server.send(peer, Message(MessageType.WELCOME, {"run": RUN}))
        assert good.recv(5).type is MessageType.WELCOME
    finally:
        good.close()
        bad.close()
        server.close()


def test_missing_certificate(tmp_path):
    with pytest.raises(ConfigurationError, match="vfl keys"):
        load_client_keys(tmp_path, "alice")
