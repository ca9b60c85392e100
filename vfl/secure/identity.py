"""Party signing identities (Ed25519) and the canonical digest of a protocol message.

Every party holds an Ed25519 signing key (Bernstein, Duif, Lange, Schwabe & Yang 2012, "High-speed high-security
signatures"; RFC 8032) through PyNaCl (libsodium). ``vfl keys --out DIR --names alice,bob`` writes, next to the
CURVE certificates,

* ``DIR/alice.sign.secret`` -- the 32-byte secret seed in hex, file mode 0600, never leaves its owner;
* ``DIR/alice.sign.pub`` -- the 32-byte public verify key in hex, handed to every co-party out of band.

(Not ``alice.sign.key``: ZeroMQ's authenticator reads every ``*.key`` file of a CURVE allowed-keys directory as a
certificate and would fail on it when both kinds of key share one directory, as ``vfl keys`` writes them.)

A party loads its own secret key and *pins* every ``*.sign.pub`` of its ``--identity-dir`` (the name is the file
name without ``.sign.pub``). A signature is accepted only if it verifies under the pinned key of the party the
protocol expects, so a relay (the coordinator) can neither forge nor substitute a party's message.

Canonical message digest (what a party signs, :func:`message_digest`)::

    sha256( canonical_json({"type": t, "body": body minus excluded fields, "frames": [sha256(frame_i) hex, ...]}) )

where ``canonical_json`` sorts keys, uses no whitespace and refuses NaN/infinity, so equal bodies give equal
bytes whatever their key order. A frame's digest is over its wire bytes (:func:`frame_bytes`): raw bytes as they
are, a numeric array as ``dtype|shape|little-endian data``, an array of Python ints in the wire's length-prefixed
signed big-endian encoding.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

from vfl.exceptions import ConfigurationError, IdentityError, PrivacyLeakWarning

__all__ = ["SECRET_SUFFIX", "PUBLIC_SUFFIX", "SIGNATURE_HEX", "SigningIdentity", "PinnedKeys", "canonical_json",
           "frame_bytes", "message_digest", "digest_of", "write_identities", "load_identity", "load_pinned",
           "load_party_identity",
           "verify_signature"]

SECRET_SUFFIX = ".sign.secret"
PUBLIC_SUFFIX = ".sign.pub"
SIGNATURE_HEX = 128  # hex characters of one Ed25519 signature (64 bytes)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")   # the wire's party-name rule (vfl.net.messages)
_HEX_RE = re.compile(r"^[0-9a-f]+$")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ConfigurationError(f"invalid party name {name!r}: use 1-64 letters, digits, '_', '.', '-'")
    return name


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8, NaN/infinity refused (IdentityError)."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise IdentityError(f"cannot sign a value that is not plain JSON: {exc}") from None


def _int_bytes(values: np.ndarray) -> bytes:
    out = bytearray()
    for v in values.ravel():
        v = int(v)
        blob = v.to_bytes((v + (v < 0)).bit_length() // 8 + 1, "big", signed=True)
        out += len(blob).to_bytes(4, "big") + blob
    return bytes(out)


def frame_bytes(frame: Any) -> bytes:
    """The bytes a payload frame's digest covers (see the module docstring)."""
    if isinstance(frame, (bytes, bytearray, memoryview)):
        return bytes(frame)
    values = getattr(frame, "values", frame)   # vfl.net.messages.IntArray wraps an object array
    if isinstance(values, np.ndarray):
        if values.dtype == object:
            return b"ints|" + json.dumps(list(values.shape)).encode() + b"|" + _int_bytes(values)
        arr = np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<")))
        return (arr.dtype.str.encode() + b"|" + json.dumps(list(arr.shape)).encode() + b"|" + arr.tobytes())
    raise IdentityError(f"cannot sign a payload frame of type {type(frame).__name__}")


def message_digest(mtype: str, body: Mapping[str, Any], frames: Sequence[Any] = (),
                   exclude: Iterable[str] = ("auth",)) -> bytes:
    """sha256 of the canonical JSON of (type, body without the ``exclude`` fields, sha256 of each frame)."""
    skip = set(exclude)
    doc = {"type": str(getattr(mtype, "value", mtype)),
           "body": {k: v for k, v in body.items() if k not in skip},
           "frames": [hashlib.sha256(frame_bytes(f)).hexdigest() for f in frames]}
    return hashlib.sha256(canonical_json(doc)).digest()


def digest_of(*parts: Any) -> bytes:
    """sha256 of the canonical JSON of ``parts`` (bytes given as hex): binds several values in one digest."""
    return hashlib.sha256(canonical_json([p.hex() if isinstance(p, bytes) else p for p in parts])).digest()


@dataclass(frozen=True)
class SigningIdentity:
    """A party's name and Ed25519 signing key."""

    name: str
    key: SigningKey

    @classmethod
    def generate(cls, name: str) -> SigningIdentity:
        """A fresh identity (libsodium's CSPRNG)."""
        return cls(_check_name(name), SigningKey.generate())

    @property
    def public_hex(self) -> str:
        """The verify key, 64 hex characters (what ``NAME.sign.pub`` holds)."""
        return bytes(self.key.verify_key).hex()

    def sign(self, digest: bytes) -> str:
        """Ed25519 signature of ``digest`` as 128 hex characters."""
        return bytes(self.key.sign(digest).signature).hex()

    def save(self, directory: str | Path) -> list[Path]:
        """Write ``NAME.sign.secret`` (mode 0600, never overwritten) and ``NAME.sign.pub``; the paths written."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        secret, public = out / f"{self.name}{SECRET_SUFFIX}", out / f"{self.name}{PUBLIC_SUFFIX}"
        try:
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ConfigurationError(f"{secret} exists; refusing to overwrite a key") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(bytes(self.key).hex() + "\n")
        public.write_text(self.public_hex + "\n")
        return [public, secret]


def _read_hex(path: Path, what: str) -> bytes:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read {what} {path}: {exc}") from None
    if len(text) != 64 or not _HEX_RE.fullmatch(text):
        raise ConfigurationError(f"{what} {path} must hold 64 lower-case hex characters (create it with `vfl keys`)")
    return bytes.fromhex(text)


def load_identity(directory: str | Path, name: str) -> SigningIdentity:
    """``DIR/NAME.sign.secret``; refused (ConfigurationError) if missing, malformed or readable by group/others."""
    path = Path(directory) / f"{_check_name(name)}{SECRET_SUFFIX}"
    if not path.is_file():
        raise ConfigurationError(f"signing key {path} not found (create it with `vfl keys --out DIR --names {name}`)")
    mode = stat.S_IMODE(path.stat().st_mode)
    if os.name == "posix" and mode & 0o077:
        raise ConfigurationError(f"signing key {path} is readable by others (mode {mode:04o}); chmod 600 it")
    return SigningIdentity(name, SigningKey(_read_hex(path, "signing key")))


class PinnedKeys:
    """The pinned Ed25519 verify keys of the parties a party trusts, by name."""

    def __init__(self, keys: Mapping[str, VerifyKey]) -> None:
        self._keys = dict(keys)

    @property
    def names(self) -> list[str]:
        return sorted(self._keys)

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def public_hex(self, name: str) -> str:
        """The pinned key of ``name`` in hex; IdentityError if ``name`` is not pinned."""
        return bytes(self._require(name)).hex()

    def with_key(self, name: str, key: VerifyKey) -> PinnedKeys:
        """A copy that also pins ``key`` for ``name``."""
        return PinnedKeys({**self._keys, name: key})

    def _require(self, name: str) -> VerifyKey:
        key = self._keys.get(name)
        if key is None:
            raise IdentityError(f"party {name!r} has no pinned identity (no {name}{PUBLIC_SUFFIX} in the "
                                "identity directory); refusing it")
        return key

    def verify(self, name: str, digest: bytes, signature: Any, what: str = "message") -> None:
        """Check ``signature`` (hex) on ``digest`` under the pinned key of ``name``; IdentityError naming it."""
        verify_signature(self._require(name), digest, signature, f"{what} from {name!r}")


def verify_signature(key: VerifyKey | bytes | str, digest: bytes, signature: Any, what: str) -> None:
    """Check a hex Ed25519 signature on ``digest``; IdentityError("bad signature on <what>") otherwise."""
    if not isinstance(signature, str) or len(signature) != SIGNATURE_HEX or not _HEX_RE.fullmatch(signature):
        raise IdentityError(f"{what} carries no valid signature; refusing it")
    try:
        vk = key if isinstance(key, VerifyKey) else VerifyKey(bytes.fromhex(key) if isinstance(key, str) else key)
        vk.verify(digest, bytes.fromhex(signature))
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        raise IdentityError(f"bad signature on {what}: not signed by its pinned identity; refusing it") from None


def load_pinned(directory: str | Path) -> PinnedKeys:
    """Every ``*.sign.pub`` of ``directory`` (name = file name without the suffix); ConfigurationError if none."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigurationError(f"identity directory {root} not found")
    keys: dict[str, VerifyKey] = {}
    for path in sorted(root.glob(f"*{PUBLIC_SUFFIX}")):
        name = path.name[: -len(PUBLIC_SUFFIX)]
        if not _NAME_RE.fullmatch(name):
            raise ConfigurationError(f"{path}: {name!r} is not a valid party name")
        keys[name] = VerifyKey(_read_hex(path, "public identity"))
    if not keys:
        raise ConfigurationError(f"identity directory {root} holds no *{PUBLIC_SUFFIX} (create them with `vfl keys`)")
    return PinnedKeys(keys)


def require_identity_choice(member: str, identity_dir: str | Path | None, insecure_no_identity: bool) -> None:
    """``member`` (e.g. "party alice", "site s1") either has a signing identity or opts out explicitly (loopback
    experiments only), never both: ConfigurationError in one line otherwise, before any data is read."""
    if not identity_dir and not insecure_no_identity:
        raise ConfigurationError(f"{member} has no signing identity: pass --identity-dir DIR (made by `vfl keys`), "
                                 "or --insecure-no-identity for loopback experiments only")
    if identity_dir and insecure_no_identity:
        raise ConfigurationError("--identity-dir and --insecure-no-identity exclude each other")


def member_identity(member: str, name: str, identity_dir: str | Path | None, insecure_no_identity: bool,
                    warning: str) -> tuple[SigningIdentity | None, PinnedKeys | None]:
    """A party's or site's signing identity and the pinned keys of its co-members (:func:`load_party_identity`),
    or (None, None) with ``warning`` (a :class:`~vfl.exceptions.PrivacyLeakWarning`) when it opted out."""
    require_identity_choice(member, identity_dir, insecure_no_identity)
    if identity_dir is None:
        warnings.warn(warning, PrivacyLeakWarning, stacklevel=3)
        return None, None
    return load_party_identity(identity_dir, name)


def load_party_identity(directory: str | Path, name: str) -> tuple[SigningIdentity, PinnedKeys]:
    """A party's ``--identity-dir``: its own ``NAME.sign.secret`` and every pinned ``*.sign.pub``; its own public file,
    if present, must match its secret key (ConfigurationError otherwise)."""
    identity = load_identity(directory, name)
    pinned = load_pinned(directory)
    if name in pinned and pinned.public_hex(name) != identity.public_hex:
        raise ConfigurationError(f"{Path(directory) / (name + PUBLIC_SUFFIX)} does not match {name}{SECRET_SUFFIX}")
    return identity, pinned.with_key(name, identity.key.verify_key)


def write_identities(directory: str | Path, names: Iterable[str]) -> list[Path]:
    """Generate and save an identity per name (``vfl keys``, the demo and the tests); the paths written."""
    written: list[Path] = []
    for name in names:
        written += SigningIdentity.generate(name).save(directory)
    return written
