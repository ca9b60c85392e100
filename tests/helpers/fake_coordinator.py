"""A hostile coordinator at the socket level, for the fake-coordinator suite (issue 14, items 1 and 5).

It speaks the real wire protocol (a ZeroMQ ROUTER, :mod:`vfl.net.messages` frames) but follows no rule: it sends
whatever PLAN the test asks for and can forge secure-product responses, e.g. echo a key holder's own request
ciphertexts back as a "masked response" (the red team's table-recovery attack). Not a test module itself
(no ``test_`` prefix); ``tests/net/test_fake_coordinator.py`` drives it against real parties.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import zmq

from vfl.net.messages import Message, MessageType, decode, encode

__all__ = ["FakeCoordinator", "echo_response_wire", "psi_probe"]


class FakeCoordinator:
    """``FakeCoordinator()``: bind on loopback; ``register()`` greets one party; ``plan(...)`` sends any PLAN."""

    def __init__(self, bind: str = "tcp://127.0.0.1") -> None:
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # no send high-water mark: a ROUTER silently drops what it cannot queue for a peer (default 1,000 messages),
        # so a burst to a party that reads slowly on a loaded machine (test_psi_flood's 1,500 chunks) lost messages
        self.sock.setsockopt(zmq.SNDHWM, 0)
        port = self.sock.bind_to_random_port(bind)
        self.endpoint = f"{bind}:{port}"
        self.run_id = secrets.token_hex(16)
        self.seq = 0
        self.received: list[tuple[bytes, Message]] = []
        self.plans: dict[bytes, dict] = {}
        #: the co-parties the fake plays honestly in the roster step (name -> their Roster, checked like a party's)
        self.players: dict[str, Any] = {}

    def send(self, peer: bytes, mtype: MessageType, body: dict | None = None, payload: list | None = None) -> None:
        self.seq += 1
        msg = Message(mtype, body or {}, payload or [], "coordinator", self.run_id, self.seq)
        self.sock.send_multipart([peer, *encode(msg)])

    def recv(self, timeout: float) -> tuple[bytes, Message] | None:
        if not self.sock.poll(int(timeout * 1000)):
            return None
        peer, *frames = self.sock.recv_multipart()
        msg = decode(frames)
        self.received.append((peer, msg))
        return peer, msg

    def wait_for(self, *types: MessageType, timeout: float = 30.0) -> tuple[bytes, Message] | None:
        """Next message of one of ``types`` (others are kept in :attr:`received`), or None after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.recv(max(0.0, min(0.2, deadline - time.monotonic())))
            if got is not None and got[1].type in types:
                return got
        return None

    def register(self, timeout: float = 30.0) -> tuple[bytes, dict]:
        """Wait for a REGISTER and answer WELCOME; returns (peer, registration body)."""
        got = self.wait_for(MessageType.REGISTER, timeout=timeout)
        assert got is not None, "no party registered"
        peer, msg = got
        self.send(peer, MessageType.WELCOME, {"run": self.run_id})
        return peer, msg.body

    def plan(self, peer: bytes, *, index: int, parties: list[dict], mechanism: str, params: dict[str, Any],
             n_samples: int, label_owner: int, model: str = "linear") -> None:
        self.plans[peer] = {"index": index, "parties": parties, "model": model, "mechanism": mechanism,
                            "params": params, "n_samples": n_samples, "label_owner": label_owner}
        self.send(peer, MessageType.PLAN, self.plans[peer])

    def roster(self, peer: bytes, identity_dir: Any, *, paillier: dict[str, str] | None = None,
               cheat: Any = None, identities: dict[str, Any] | None = None, timeout: float = 30.0) -> Message | None:
        """The roster step of the plan sent to ``peer``, with every other plan party played honestly: each signs its
        registration (as the plan describes it) and its entry with its own identity from ``identity_dir``, or the
        one given in ``identities`` (e.g. an invented party's fresh key; ``paillier``: Paillier key fingerprints by
        name). ``cheat(entries)`` may alter the entries before the ROSTER is sent. Returns the real party's
        ROSTER_ENTRY (None if it sent an ERROR or nothing)."""
        from vfl.protocols.contracts import RegisterBody
        from vfl.protocols.roster import Roster, sign_registration
        from vfl.secure.identity import load_identity, load_pinned

        got = self.wait_for(MessageType.ROSTER_ENTRY, MessageType.ERROR, timeout=timeout)
        if got is None or got[1].type is MessageType.ERROR:
            return None
        plan, entries = self.plans[peer], []
        for i, p in enumerate(plan["parties"]):
            if i == plan["index"]:
                entries.append(got[1].body)
                continue
            identity = (identities or {}).get(p["name"]) or load_identity(identity_dir, p["name"])
            reg = sign_registration(identity, RegisterBody(
                name=p["name"], n_rows=plan["n_samples"], features=p["features"],
                label_owner=i == plan["label_owner"]).to_body())
            self.players[p["name"]] = Roster(name=p["name"], run=self.run_id, plan_body={**plan, "index": i},
                                             registration=reg, identity=identity, pinned=load_pinned(identity_dir),
                                             paillier=(paillier or {}).get(p["name"]))
            entries.append(self.players[p["name"]].entry().body)
        if cheat is not None:
            cheat(entries)
        roster = Message(MessageType.ROSTER, {"entries": entries})
        for player in self.players.values():
            try:
                player.verify(roster)
            except Exception:  # noqa: BLE001 - a cheating roster: the played parties sign nothing later
                pass
        self.send(peer, MessageType.ROSTER, {"entries": entries})
        return got[1]

    def send_as(self, peer: bytes, sender: str, mtype: MessageType, body: dict, payload: list | None = None) -> None:
        """Relay a message as the played co-party ``sender`` would send it: sealed with its identity, plus the
        coordinator's ``origin``."""
        from vfl.protocols.contracts import Out

        sealed = self.players[sender].seal(Out(type=mtype.value, body=body, payload=payload or []))
        self.send(peer, mtype, {**sealed.body, "origin": sender}, payload)

    def sent_by_party(self, mtype: MessageType) -> list[Message]:
        return [m for _, m in self.received if m.type is mtype]

    def close(self) -> None:
        self.sock.close(linger=0)


def echo_response_wire(request_wire: dict, n_resp_cols: int) -> dict:
    """The header of a MASKED_RESPONSE that relabels the key holder's own request as the response."""
    return {"kind": "vfl.secure.masked_response", "version": 1, "session": request_wire["session"],
            "key_fingerprint": request_wire["key_fingerprint"], "ciphertext_bytes": request_wire["ciphertext_bytes"],
            "slot_bits": request_wire["slot_bits"], "n_enc_cols": request_wire["n_cols"],
            "n_resp_cols": n_resp_cols, "n_groups": request_wire["n_groups"]}


def psi_probe(fake: FakeCoordinator, peer: bytes, guesses: list[str], *, registrations: list[dict] | None = None,
              sign: Any = None, pad_to: int | None = None, timeout: float = 60.0,
              replace: dict[int, bytes] | None = None) -> dict[str, Any]:
    """The PSI membership oracle of issue 20, item 5: the fake coordinator poses as a second PSI party.

    It opens a 2-party ring with the victim at index 0 (PSI_START with ``registrations`` if given; the old wire
    shape without them otherwise), takes the victim's own list ``H(a)^k_v``, sends ``H(g)^k_p`` for its guesses
    ``g`` as "party 1's" list (signed with ``sign``, a :class:`vfl.secure.identity.SigningIdentity`, if given)
    and waits (``pad_to``: the list is lengthened to that many points by repeating the blinded guesses, valid
    points all, to send a long list without hashing as many guesses). If the victim re-blinds it,
    ``H(g)^(k_p k_v)`` is compared with ``H(a)^(k_v k_p)`` (the victim's list raised to the prober's key): equal
    points are guessed IDs the victim holds. Returns ``{"own": n points the victim sent for itself, "reblinded": n
    points it re-blinded (None if it refused), "learned": the guesses found to be members, "error": the victim's
    ERROR reason or None}``.
    """
    from vfl.secure.psi import POINT_BYTES, BlindingKey, split_points  # the tree under test (also the pre-fix one)

    start = {"index": 0, "parties": 2, **({"registrations": registrations} if registrations is not None else {})}
    fake.send(peer, MessageType.PSI_START, start)
    result: dict[str, Any] = {"own": None, "reblinded": None, "learned": [], "error": None}
    got = fake.wait_for(MessageType.PSI_POINTS, MessageType.ERROR, timeout=timeout)
    if got is None or got[1].type is MessageType.ERROR:
        result["error"] = None if got is None else got[1].body.get("reason")
        return result
    own = got[1].blob(0)
    result["own"] = len(own) // POINT_BYTES
    key = BlindingKey()
    probe = key.blind(guesses)
    if pad_to is not None and pad_to > len(guesses):
        probe = (probe * (pad_to // len(guesses) + 1))[:pad_to * POINT_BYTES]
    for i, point in (replace or {}).items():    # hostile encodings in place of blinded guesses
        probe = probe[:i * POINT_BYTES] + point + probe[(i + 1) * POINT_BYTES:]
    body: dict[str, Any] = {"origin": 1, "hops": 1, "offset": 0}
    if sign is not None:
        from vfl.protocols.alignment import PsiRing
        ring = PsiRing.from_start(start, index=1, name=None, n_ids=registrations[1]["n_rows"], pinned=None,
                                  run=fake.run_id)
        body["auth"] = sign.sign(ring.list_digest(body, probe))
    fake.send(peer, MessageType.PSI_POINTS, body, [probe])
    got = fake.wait_for(MessageType.PSI_POINTS, MessageType.ERROR, timeout=timeout)
    if got is None or got[1].type is MessageType.ERROR:
        result["error"] = None if got is None else got[1].body.get("reason")
        return result
    back = split_points(got[1].blob(0))
    result["reblinded"] = len(back)
    mine = set(split_points(key.reblind(own)))
    result["learned"] = [g for g, p in zip(guesses, back[:len(guesses)], strict=True) if p in mine]
    return result
