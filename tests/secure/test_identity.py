"""Ed25519 party identities: key files, pinning, the canonical message digest, sign / verify."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, IdentityError, ProtocolError
from vfl.secure.identity import (
    PUBLIC_SUFFIX,
    SECRET_SUFFIX,
    SigningIdentity,
    canonical_json,
    load_identity,
    load_party_identity,
    load_pinned,
    message_digest,
    write_identities,
)


@pytest.fixture
def certs(tmp_path):
    write_identities(tmp_path, ["alice", "bob"])
    return tmp_path


def test_files_modes_and_roundtrip(certs):
    secret = certs / f"alice{SECRET_SUFFIX}"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    alice = load_identity(certs, "alice")
    pinned = load_pinned(certs)
    assert pinned.names == ["alice", "bob"]
    assert pinned.public_hex("alice") == alice.public_hex == (certs / f"alice{PUBLIC_SUFFIX}").read_text().strip()
    digest = message_digest("enc_request", {"block": "M01", "to": "bob"}, [b"key"])
    pinned.verify("alice", digest, alice.sign(digest))


def test_never_overwrites_a_secret(certs):
    with pytest.raises(ConfigurationError, match="refusing to overwrite"):
        write_identities(certs, ["alice"])


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_world_readable_secret_refused(certs):
    os.chmod(certs / f"bob{SECRET_SUFFIX}", 0o644)
    with pytest.raises(ConfigurationError, match="readable by others"):
        load_identity(certs, "bob")


def test_missing_and_malformed_files(tmp_path, certs):
    with pytest.raises(ConfigurationError, match="not found"):
        load_identity(certs, "carol")
    (certs / f"carol{PUBLIC_SUFFIX}").write_text("zz\n")
    with pytest.raises(ConfigurationError, match="hex"):
        load_pinned(certs)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigurationError, match="holds no"):
        load_pinned(empty)


def test_own_public_file_must_match_secret(certs):
    (certs / f"alice{PUBLIC_SUFFIX}").write_text(SigningIdentity.generate("alice").public_hex + "\n")
    with pytest.raises(ConfigurationError, match="does not match"):
        load_party_identity(certs, "alice")


def test_tampered_body_frame_wrong_key_unpinned(certs):
    alice, bob = load_identity(certs, "alice"), load_identity(certs, "bob")
    pinned = load_pinned(certs)
    body = {"block": "M01", "to": "bob", "wire": {"slots": 3}}
    frames = [b"\x01" * 100, np.arange(6, dtype=np.int64).reshape(2, 3),
              np.array([2**100, -5, 0], dtype=object)]
    digest = message_digest("masked_response", body, frames)
    sig = alice.sign(digest)
    pinned.verify("alice", digest, sig)
    tampered_body = message_digest("masked_response", {**body, "wire": {"slots": 4}}, frames)
    with pytest.raises(IdentityError, match="bad signature on masked_response from 'alice'"):
        pinned.verify("alice", tampered_body, sig, "masked_response")
    for i, changed in enumerate([b"\x01" * 99 + b"\x02", np.arange(1, 7, dtype=np.int64).reshape(2, 3),
                                 np.array([2**100, -5, 1], dtype=object)]):
        other = list(frames)
        other[i] = changed
        with pytest.raises(IdentityError, match="bad signature"):
            pinned.verify("alice", message_digest("masked_response", body, other), sig)
    with pytest.raises(IdentityError, match="bad signature"):
        pinned.verify("alice", message_digest("enc_chunk", body, frames), sig)   # another type
    with pytest.raises(IdentityError, match="'alice'"):
        pinned.verify("alice", digest, bob.sign(digest))   # wrong key
    with pytest.raises(IdentityError, match="'mallory' has no pinned identity"):
        pinned.verify("mallory", digest, SigningIdentity.generate("mallory").sign(digest))
    with pytest.raises(IdentityError, match="no valid signature"):
        pinned.verify("alice", digest, None)
    assert issubclass(IdentityError, ProtocolError)


def test_canonical_json_order_independent_and_auth_excluded():
    a = {"to": "bob", "block": "M01", "wire": {"b": 1, "a": [1, 2]}}
    b = {"wire": {"a": [1, 2], "b": 1}, "block": "M01", "to": "bob"}
    assert canonical_json(a) == canonical_json(b)
    assert message_digest("credit", a) == message_digest("credit", b)
    assert message_digest("credit", a) == message_digest("credit", {**b, "auth": "00" * 64})
    assert message_digest("credit", a) != message_digest("credit", {**b, "origin": "alice"})
    assert message_digest("credit", a) == message_digest("credit", {**b, "origin": "alice"},
                                                         exclude=("auth", "origin"))
    with pytest.raises(IdentityError):
        canonical_json({"x": float("nan")})
