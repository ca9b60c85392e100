"""The signed roster: after the PLAN and before anything data-dependent, every party checks who it runs with.

The coordinator relays everything, so without end-to-end authentication it can play any party: substitute its own
Paillier key in a relayed request, invent parties, forge responses (issue 20). Each party holds an Ed25519 identity
(:mod:`vfl.secure.identity`) and pins its co-parties' public keys out of band; then

1. **REGISTER** carries the party's public key (``identity``) and its signature (``auth``) over the registration
   statement: name, row count (its ID count with ``--id``), feature names, label owner, row IDs, order
   (:func:`sign_registration`; digest :func:`registration_digest`).
2. **ROSTER_ENTRY** (party -> coordinator, after the PLAN and its policy check): the party's signed registration,
   the digest of the plan it received (:func:`plan_digest`: the PLAN body without the addressee's ``index``), the
   fingerprint (sha256) of the Paillier public key it will encrypt under (FM runs; none in BCD runs), and its
   signature over ``H(run id, plan digest, registration digest, Paillier fingerprint, nonce)`` (a fresh random nonce
   per party and run, so the roster digest is new even under a reused run id).
3. **ROSTER** (coordinator -> every party, :class:`RosterCoordinator`): every entry in plan order, as received.
   The coordinator adds nothing a party trusts.
4. **Check** (:meth:`Roster.verify`): every party the plan names is pinned and named once, every registration and
   entry is signed by that pinned key, every entry has this party's own plan digest, and every registration matches
   the plan (name, feature names, widths, label owner, rows). The roster digest
   ``H(run id, plan digest, H(entry_1), ..., H(entry_K))`` binds everything that follows.
5. **Party-to-party messages** relayed by the coordinator (ENC_REQUEST, ENC_CHUNK, CREDIT, MASKED_RESPONSE,
   BCD_REMAINDER, GD_REQUEST, GD_RESPONSE) carry ``auth`` = the sender's signature over ``H(roster digest,
   message digest)``, the message digest leaving out ``auth`` and the coordinator's ``origin`` (:meth:`Roster.seal`).
   The receiver verifies it against the pinned key of the sender the plan names for that block
   (:meth:`Roster.check`), and an ENC_REQUEST's (GD_REQUEST's) Paillier key must be the encryptor's roster key
   (:meth:`Roster.check_paillier`).

With these, a hostile coordinator can drop or delay messages (the run then stops) but can neither forge, alter,
redirect nor replay a party-to-party message into another run, nor add a party nobody pinned. A party run with
``--insecure-no-identity`` (loopback experiments) sends unsigned entries and checks only the roster's consistency;
the parties with identities refuse it, and the coordinator notes it in the model's privacy report.
Ed25519: Bernstein et al. 2012 (RFC 8032); docs/threat_model.md.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from vfl.exceptions import IdentityError, ProtocolError
from vfl.protocols.contracts import Incoming, Out, kind_of
from vfl.secure.identity import (
    PinnedKeys,
    SigningIdentity,
    canonical_json,
    digest_of,
    message_digest,
    verify_signature,
)

__all__ = ["ROSTER_ENTRY", "ROSTER", "RELAYED", "RELEASE_SIGNED", "Roster", "RosterCoordinator", "plan_digest",
           "registration_digest", "sign_registration", "verify_registration", "entry_digest", "check_self_signed",
           "verify_own_entry"]

ROSTER_ENTRY = "roster_entry"
ROSTER = "roster"
#: party-to-party messages the coordinator relays: each carries its sender's signature (``auth``)
NONCE_BYTES = 16   # a roster entry's fresh nonce (hex in the entry)
RELAYED = frozenset({"enc_request", "enc_chunk", "credit", "masked_response", "bcd_remainder", "gd_request",
                     "gd_response"})
#: what a party sends the coordinator that makes up the release: signed too, so that at the end of the run every party
#: can re-derive the model from contributions their producers signed (vfl.net.model_check, issue 29): the FM blocks
#: and shares, the noisy-gd shares of each round and the (DP-)BCD coefficients (vfl.net.round_check)
RELEASE_SIGNED = frozenset({"ready", "block", "share", "gd_share", "bcd_coef"})
_RELAY_EXCLUDE = ("auth", "origin")


def plan_digest(plan_body: dict) -> bytes:
    """sha256 of the canonical PLAN body without ``index`` (the only field that differs between the parties)."""
    return hashlib.sha256(canonical_json({k: v for k, v in plan_body.items() if k != "index"})).digest()


def registration_digest(body: dict) -> bytes:
    """Digest of a REGISTER statement (its whole body, public key included, signature excluded)."""
    return message_digest("register", body, exclude=("auth",))


def sign_registration(identity: SigningIdentity, body: dict) -> dict:
    """The REGISTER body with this party's public key and its signature over the statement."""
    signed = {**body, "identity": identity.public_hex}
    return {**signed, "auth": identity.sign(registration_digest(signed))}


def verify_registration(pinned: PinnedKeys, body: dict) -> None:
    """The registration of ``body['name']`` carries its pinned key and that key's signature; IdentityError else."""
    name = str(body.get("name"))
    if body.get("identity") != pinned.public_hex(name):
        raise IdentityError(f"party {name!r} registered without its pinned identity (no key or another key); "
                            "refusing the run")
    pinned.verify(name, registration_digest(body), body.get("auth"), "registration")


def check_self_signed(body: dict) -> None:
    """The coordinator's check of a REGISTER: an ``identity`` comes with its own valid signature (IdentityError
    naming the party otherwise). It proves consistency, not identity: only the parties pin keys."""
    if "identity" not in body and "auth" not in body:
        return
    verify_signature(str(body.get("identity")), registration_digest(body), body.get("auth"),
                     f"registration of {body.get('name')!r}")


def entry_digest(run: str, plan: bytes, registration: dict, paillier: str | None, nonce: str | None = None
                 ) -> bytes:
    """What a ROSTER_ENTRY's signature covers: the run, the plan, the registration, the Paillier key and the
    party's fresh nonce (absent only in model files written before entries carried one)."""
    parts = [run, plan, registration_digest(registration), paillier] + ([] if nonce is None else [nonce])
    return digest_of("vfl roster entry", *parts)


def _nonce_of(entry: dict, name: str, *, required: bool = True) -> str | None:
    """The entry's nonce. A live run requires one (an entry signed without it is a downgrade a hostile coordinator
    could replay); only a model file written before entries carried one may lack it (``required=False``)."""
    nonce = entry.get("nonce")
    if nonce is None and not required:
        return None
    if not (isinstance(nonce, str) and len(nonce) == 2 * NONCE_BYTES):
        raise ProtocolError(f"party {name!r}'s roster entry carries a missing or malformed nonce")
    return nonce


class Roster:
    """Party side of the roster step: this party's entry, the check of the ROSTER, then seal / check of every
    party-to-party message. ``identity``/``pinned`` None: run without identities (``--insecure-no-identity``)."""

    def __init__(self, *, name: str, run: str, plan_body: dict, registration: dict,
                 identity: SigningIdentity | None, pinned: PinnedKeys | None, paillier: str | None = None) -> None:
        if (identity is None) != (pinned is None):
            raise ValueError("identity and pinned keys go together")
        self.name, self.run, self.plan_body = name, run, plan_body
        self.registration, self.identity, self.pinned, self.paillier = registration, identity, pinned, paillier
        self.plan = plan_digest(plan_body)
        #: fresh per run: the roster digest (which binds every relayed message) is new even if a hostile
        #: coordinator reuses a run id with the same plan and registrations (BCD runs have no Paillier key)
        self.nonce = secrets.token_hex(NONCE_BYTES)
        self.digest: bytes | None = None
        self.keys: dict[str, str] = {}           # party -> pinned Ed25519 key (hex), after verify
        self.entries: list[dict] = []            # the ROSTER's entries, after verify (recorded in the model file)
        self.paillier_keys: dict[str, str | None] = {}   # party -> Paillier key fingerprint, after verify

    @property
    def signed(self) -> bool:
        return self.identity is not None

    def entry(self) -> Out:
        """This party's ROSTER_ENTRY (signed unless it runs without identities)."""
        body: dict[str, Any] = {"party": self.name, "plan": self.plan.hex(), "registration": self.registration,
                                "paillier": self.paillier, "nonce": self.nonce}
        if self.identity is not None:
            body["auth"] = self.identity.sign(entry_digest(self.run, self.plan, self.registration, self.paillier,
                                                           self.nonce))
        return Out(type=ROSTER_ENTRY, body=body)

    def verify(self, msg: Incoming) -> None:
        """Check the ROSTER (module docstring, step 4); afterwards :attr:`digest` binds the run."""
        if self.digest is not None or kind_of(msg) != ROSTER:
            raise ProtocolError(f"unexpected {kind_of(msg)}: this party expects one roster")
        parties, entries = self.plan_body["parties"], msg.body.get("entries")
        if not isinstance(entries, list) or len(entries) != len(parties):
            raise ProtocolError(f"the roster has {len(entries) if isinstance(entries, list) else '?'} entries for "
                                f"the plan's {len(parties)} parties")
        names = [str(p.get("name")) for p in parties]
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:   # a copied entry still verifies: its signature does not cover its index
            raise IdentityError(f"the plan lists party {twice!r} twice; refusing the run")
        if self.pinned is not None:
            for name in names:   # an invented party is named before anything else is looked at
                self.pinned.public_hex(name)
        for i, (party, entry) in enumerate(zip(parties, entries, strict=True)):
            self._check_entry(i, party, entry)
        if entries[self.plan_body["index"]] != self.entry().body:   # Ed25519 signatures are deterministic
            raise IdentityError(f"the roster's entry for {self.name!r} is not the one this party sent")
        self.digest = digest_of("vfl roster", self.run, self.plan,
                                [message_digest(ROSTER_ENTRY, e, exclude=()).hex() for e in entries])
        self.entries = list(entries)

    def _check_entry(self, i: int, party: dict, entry: Any) -> None:
        name = str(party.get("name"))
        if not isinstance(entry, dict) or entry.get("party") != name or not isinstance(entry.get("registration"),
                                                                                        dict):
            raise ProtocolError(f"the roster's entry {i} is not party {name!r}'s")
        reg, paillier = entry["registration"], entry.get("paillier")
        if entry.get("plan") != self.plan.hex():
            raise IdentityError(f"party {name!r} was sent a different plan than this party; refusing the run")
        if self.pinned is not None:
            verify_registration(self.pinned, reg)
            self.pinned.verify(name, entry_digest(self.run, self.plan, reg, paillier, _nonce_of(entry, name)),
                               entry.get("auth"), "roster entry")
            self.keys[name] = self.pinned.public_hex(name)
        self._check_matches_plan(i, name, party, reg)
        self.paillier_keys[name] = paillier if isinstance(paillier, str) else None

    def _check_matches_plan(self, i: int, name: str, party: dict, reg: dict) -> None:
        """The plan describes each party as it registered: names, features, widths, label owner, rows."""
        features = reg.get("features")
        width = len(features) + (1 if party.get("intercept") else 0) if isinstance(features, list) else -1
        n, rows = self.plan_body["n_samples"], reg.get("n_rows")
        rows_ok = isinstance(rows, int) and (n <= rows if reg.get("row_ids") else n == rows)
        if (reg.get("name") != name or features != party.get("features") or width != party.get("n_features")
                or bool(reg.get("label_owner")) != (i == self.plan_body["label_owner"]) or not rows_ok):
            raise IdentityError(f"the plan does not describe party {name!r} as it registered (features, widths, "
                                "label owner or rows differ); refusing the run")

    def _bound(self, mtype: str, body: dict, frames: list) -> bytes:
        if self.digest is None:
            raise ProtocolError(f"{mtype} before the roster was checked")
        return digest_of("vfl relay", self.digest, message_digest(mtype, body, frames, exclude=_RELAY_EXCLUDE))

    def seal(self, out: Out) -> Out:
        """``out`` with this party's signature bound to the roster (relayed types only; unchanged otherwise)."""
        if (out.type not in RELAYED and out.type not in RELEASE_SIGNED) or self.identity is None:
            return out
        auth = self.identity.sign(self._bound(out.type, out.body, out.payload))
        return Out(type=out.type, body={**out.body, "auth": auth}, payload=out.payload, to=out.to)

    def check(self, msg: Incoming, sender: str) -> None:
        """A relayed message is addressed to this party and signed by ``sender`` (the plan's sender) under this
        roster; IdentityError naming the sender otherwise. Without identities: the address only."""
        kind = kind_of(msg)
        if msg.body.get("to") != self.name:
            raise ProtocolError(f"{kind} addressed to {msg.body.get('to')!r} reached {self.name!r}")
        if self.pinned is not None:
            self.pinned.verify(sender, self._bound(kind, msg.body, list(msg.payload)), msg.body.get("auth"), kind)

    def check_recorded(self, kind: str, body: dict, frames: list, sender: str) -> None:
        """A message of the release as the coordinator recorded it (:data:`RELAYED` or :data:`RELEASE_SIGNED`) is
        signed by ``sender`` under this roster; IdentityError naming the sender otherwise (no check without
        identities)."""
        if self.pinned is not None:
            self.pinned.verify(sender, self._bound(kind, body, frames), body.get("auth"), f"recorded {kind}")

    def check_paillier(self, key_bytes: bytes, encryptor: str, block: str) -> None:
        """An ENC_REQUEST's Paillier public key is its encryptor's roster key; IdentityError otherwise."""
        if self.paillier_keys.get(encryptor) != hashlib.sha256(key_bytes).hexdigest():
            raise IdentityError(f"the request for block {block} is under a Paillier key that is not {encryptor}'s "
                                "roster key (substituted on the way); refusing it before computing anything")


def verify_own_entry(record: Any, name: str, public_hex: str | None, features: list[str]) -> None:
    """A serving party's check of a model's recorded roster (``{"run", "plan", "entries"}``, as
    :meth:`RosterCoordinator.record` writes it into the model file): it holds exactly one entry for ``name``, whose
    registration and entry are signed by ``public_hex`` (this party's own key; None: a party without identity checks
    the rest only) and whose registration's feature names are ``features``. IdentityError, one line, otherwise."""
    if not isinstance(record, dict) or not isinstance(record.get("entries"), list):
        raise IdentityError(f"party {name}: the model records no training roster (trained before vfl wrote it, or "
                            "by a run without one), so nothing shows this party took part in training it")
    mine = [e for e in record["entries"] if isinstance(e, dict) and e.get("party") == name]
    if len(mine) != 1:
        raise IdentityError(f"party {name}: the model's roster has {len(mine) or 'no'} entr"
                            f"{'y' if len(mine) == 1 else 'ies'} for this party: it did not take part in training it "
                            "as recorded")
    entry, run, plan = mine[0], record.get("run"), record.get("plan")
    reg = entry.get("registration")
    if not isinstance(reg, dict) or reg.get("name") != name or entry.get("plan") != plan or not isinstance(run, str) \
            or not isinstance(plan, str):
        raise IdentityError(f"party {name}: the model's roster entry for this party is malformed")
    if public_hex is not None:
        if "auth" not in entry or "auth" not in reg:
            raise IdentityError(f"party {name}: the model's roster entry for this party is unsigned (trained with "
                                "--insecure-no-identity?); this party did not sign it")
        if reg.get("identity") != public_hex:
            raise IdentityError(f"party {name}: the model's roster entry for this party was signed by another key, "
                                "not this party's identity")
        try:
            plan_bytes = bytes.fromhex(plan)
        except ValueError:
            raise IdentityError(f"party {name}: the model's roster names no valid plan digest") from None
        verify_signature(public_hex, registration_digest(reg), reg.get("auth"),
                         f"the model's roster registration of {name!r}")
        verify_signature(public_hex, entry_digest(run, plan_bytes, reg, entry.get("paillier"), _nonce_of(entry, name,
                                                                                         required=False)),
                         entry.get("auth"), f"the model's roster entry of {name!r}")
    if reg.get("features") != list(features):
        raise IdentityError(f"party {name}: the features it registered for training "
                            f"({', '.join(map(str, reg.get('features') or []))}) are not the model's columns it would "
                            f"serve ({', '.join(features)})")


class RosterCoordinator:
    """Coordinator side: collect one ROSTER_ENTRY per party, then send every party the ROSTER. It checks the
    entries only to name a broken party early (each signature under the key its REGISTER carried); it cannot make
    a party accept anything the party's own pinned keys do not verify."""

    def __init__(self, names: list[str], run: str, plan_bodies: list[dict], registrations: list[dict]) -> None:
        self.names, self.run, self.registrations = names, run, registrations
        self.plans = [plan_digest(b) for b in plan_bodies]
        self.entries: dict[int, dict] = {}

    @property
    def done(self) -> bool:
        return len(self.entries) == len(self.names)

    @property
    def unsigned(self) -> list[str]:
        """Parties that run without identities (``--insecure-no-identity``)."""
        return [self.names[i] for i, e in sorted(self.entries.items()) if "auth" not in e]

    def record(self) -> dict[str, Any]:
        """The complete roster as received (public): what the model file records for its serving parties."""
        if not self.done:
            raise ProtocolError("the roster is not complete")
        return {"run": self.run, "plan": self.plans[0].hex(),
                "entries": [self.entries[j] for j in range(len(self.names))]}

    def handle(self, i: int, msg: Incoming) -> list[Out]:
        name, kind = self.names[i], kind_of(msg)
        if kind != ROSTER_ENTRY or i in self.entries:
            raise ProtocolError(f"party {name} sent {kind} where its one roster entry was expected")
        entry = msg.body
        if entry.get("party") != name or entry.get("registration") != self.registrations[i]:
            raise ProtocolError(f"party {name}'s roster entry does not carry its registration")
        if entry.get("plan") != self.plans[i].hex():
            raise ProtocolError(f"party {name}'s roster entry names another plan")
        key = self.registrations[i].get("identity")
        if (key is None) != ("auth" not in entry):
            raise IdentityError(f"party {name} registered {'with' if key else 'without'} an identity but its roster "
                                "entry is " + ("unsigned" if key else "signed"))
        if key is not None:
            digest = entry_digest(self.run, self.plans[i], entry["registration"], entry.get("paillier"),
                                  _nonce_of(entry, name))
            verify_signature(str(key), digest, entry.get("auth"), f"roster entry from {name!r}")
        self.entries[i] = dict(entry)
        if not self.done:
            return []
        roster = self.record()["entries"]
        return [Out(type=ROSTER, body={"entries": roster}, to=j) for j in range(len(self.names))]
