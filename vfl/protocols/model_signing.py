"""Signed models: a model is servable only if every party of its training roster signed its digest (issue 29).

A model file records the run's signed roster (:mod:`vfl.protocols.roster`) and, since this change, ``signatures``:
for each party of the roster an Ed25519 signature (RFC 8032) over :func:`vfl.models.modelio.model_document_digest`,
the sha256 of the whole file without its signatures. A party gives that signature only at the end of a run it took
part in and completed, after re-deriving the coefficients from the run's release (:mod:`vfl.net.model_check`). So

* a roster alone (collected by a hostile coordinator that then aborted) no longer makes a model servable;
* coefficients, bounds, preprocessing, report, run id or roster altered after the run break every signature;
* signatures of another run do not verify over this file's digest (its run id and roster differ).

:func:`verify_model_signatures` is the one check: every roster party named once, its registration and roster entry
signed by the key it registered (or, with ``pinned``, by the key the checker pinned for it), the roster's parties and
features those of the model, and that key's valid signature over the digest. ``vfl serve`` checks with its pinned
keys and its own key; ``vfl predict`` and ``vfl score`` with the keys the roster records (``--identity-dir`` pins
them). :func:`load_signed_model` is the loader those commands use; ``allow_unsigned`` (``--allow-unsigned-model``)
accepts, loudly, only a file that carries no signatures at all (written before models were signed, by a version
that did not yet sign (DP-)BCD and noisy-gd models, or by an ``--insecure-no-identity`` run); a file with a missing
or invalid signature is refused even then, and ``vfl serve`` refuses even with it an unsigned file that records a
signed roster (:func:`check_signed`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vfl.exceptions import IdentityError, PrivacyLeakWarning
from vfl.models.modelio import FittedModel, load_model
from vfl.protocols.roster import entry_digest, registration_digest
from vfl.secure.identity import PinnedKeys, verify_signature

__all__ = ["verify_model_signatures", "load_signed_model", "check_signed", "is_unsigned", "has_signed_roster",
           "UNSIGNED_MODEL_WARNING"]

#: what an opted-out loader says (stderr warning and the command's log)
UNSIGNED_MODEL_WARNING = ("model {path}: {reason}; used ANYWAY (--allow-unsigned-model): nothing shows that its "
                          "parties released these coefficients")


def is_unsigned(model: FittedModel) -> bool:
    """The model carries no signatures at all (an older file, a ``--insecure-no-identity`` run)."""
    return not model.signatures


def _roster_entries(model: FittedModel) -> list[dict]:
    record = model.roster
    if not isinstance(record, dict) or not isinstance(record.get("entries"), list):
        raise IdentityError("the model records no training roster (written before vfl recorded one?), so no party's "
                            "signature can be checked")
    if record.get("run") != model.run_id or not isinstance(record.get("plan"), str):
        raise IdentityError(f"the model's roster is of run {record.get('run')!r}, not of the model's run "
                            f"{model.run_id!r}")
    entries = [e for e in record["entries"] if isinstance(e, dict)]
    names = [str(e.get("party")) for e in entries]
    if len(entries) != len(record["entries"]) or names != [p.name for p in model.parties]:
        raise IdentityError(f"the model's roster names the parties {', '.join(names)}, not the model's "
                            f"{', '.join(p.name for p in model.parties)}")
    return entries


def _check_entry(model: FittedModel, entry: dict, key: str, party_features: list[str]) -> None:
    """The roster entry and its registration are signed by ``key`` and register the model's columns of that party."""
    name, reg, plan = str(entry.get("party")), entry.get("registration"), str(model.roster["plan"])  # type: ignore
    if not isinstance(reg, dict) or reg.get("name") != name or reg.get("identity") != key:
        raise IdentityError(f"the model's roster entry of {name!r} is not registered under that party's key")
    if reg.get("features") != party_features:
        raise IdentityError(f"party {name} registered other columns than the model's columns of {name}")
    try:
        plan_bytes = bytes.fromhex(plan)
    except ValueError:
        raise IdentityError("the model's roster names no valid plan digest") from None
    verify_signature(key, registration_digest(reg), reg.get("auth"), f"the model's roster registration of {name!r}")
    nonce = entry.get("nonce")
    verify_signature(key, entry_digest(model.run_id, plan_bytes, reg, entry.get("paillier"),
                                       nonce if isinstance(nonce, str) else None),
                     entry.get("auth"), f"the model's roster entry of {name!r}")


def verify_model_signatures(model: FittedModel, *, pinned: PinnedKeys | None = None,
                            own: tuple[str, str] | None = None) -> list[str]:
    """Check that every party of ``model``'s roster signed its digest (module docstring); the parties' names.

    ``pinned``: the checker's pinned keys; every roster party must be pinned with the key it signed with.
    ``own``: ``(name, public key hex)`` of a serving party; it must be in the roster under that key.
    IdentityError (one line) otherwise."""
    entries = _roster_entries(model)
    signatures = model.signatures or {}
    if not signatures:
        raise IdentityError("the model carries no party's signature (written before models were signed, or by a "
                            "run with --insecure-no-identity)")
    digest = model.document_digest()
    names = []
    for entry, party in zip(entries, model.parties, strict=True):
        name = party.name
        key = entry.get("registration", {}).get("identity") if isinstance(entry.get("registration"), dict) else None
        if not isinstance(key, str):
            raise IdentityError(f"party {name} trained without an identity (--insecure-no-identity): it cannot have "
                                "signed the model")
        if pinned is not None and pinned.public_hex(name) != key:
            raise IdentityError(f"the model's roster names for party {name} a key that is not the one pinned for it")
        if own is not None and name == own[0] and key != own[1]:
            raise IdentityError(f"party {name}: the model's roster entry for this party is under another key")
        _check_entry(model, entry, key, list(party.features))
        if name not in signatures:
            raise IdentityError(f"party {name} did not sign this model")
        verify_signature(key, digest, signatures[name], f"party {name}'s signature over this model file (altered "
                                                         "after the run, or signed for another run)")
        names.append(name)
    if own is not None and own[0] not in names:
        raise IdentityError(f"party {own[0]} is not in the model's roster: it did not take part in training it")
    if set(signatures) - set(names):
        raise IdentityError("the model carries signatures of parties that are not in its roster")
    return names


def load_signed_model(path: str | Path, *, allow_unsigned: bool = False, pinned: PinnedKeys | None = None,
                      own: tuple[str, str] | None = None, log: Callable[[str], Any] | None = None) -> FittedModel:
    """:func:`vfl.models.modelio.load_model`, then :func:`verify_model_signatures`. ``allow_unsigned``: a file with no
    signatures at all is returned with a loud warning (:class:`PrivacyLeakWarning` and ``log``); any other failure
    raises :class:`IdentityError` naming the file."""
    model = load_model(path)
    check_signed(model, str(path), allow_unsigned=allow_unsigned, pinned=pinned, own=own, log=log)
    return model


def has_signed_roster(model: FittedModel) -> bool:
    """The model records a roster whose entries are signed: its run had identities, so its parties could sign it."""
    entries = model.roster.get("entries") if isinstance(model.roster, dict) else None
    return isinstance(entries, list) and any(isinstance(e, dict) and "auth" in e for e in entries)


def check_signed(model: FittedModel, what: str, *, allow_unsigned: bool = False, pinned: PinnedKeys | None = None,
                 own: tuple[str, str] | None = None, log: Callable[[str], Any] | None = None,
                 serving: bool = False) -> bool:
    """:func:`load_signed_model`'s check of an already loaded model; True if signed, False if accepted unsigned.
    ``serving`` (``vfl serve``): the opt-out does not cover an unsigned model that records a signed roster (what a
    hostile coordinator writes from the entries of a run it aborted, issue 29 item 3): only a model without roster
    or of an ``--insecure-no-identity`` run."""
    try:
        verify_model_signatures(model, pinned=pinned, own=own)
        return True
    except IdentityError as exc:
        optable = is_unsigned(model) and not (serving and has_signed_roster(model))
        if not (allow_unsigned and optable):
            hint = ("; --allow-unsigned-model uses it anyway" if optable
                    else "; refused even with --allow-unsigned-model")
            reason = str(exc).removesuffix("; refusing it")
            raise IdentityError(f"model {what}: {reason}; refusing it{hint}") from None
        text = UNSIGNED_MODEL_WARNING.format(path=what, reason=exc)
        warnings.warn(text, PrivacyLeakWarning, stacklevel=3)
        if log is not None:
            log(f"WARNING: {text}")
        return False
