"""The model check at the end of an FM run: every party re-derives the model from the release, then signs it.

Issue 29: a party must serve only a model that follows from a run it took part in and completed. After the FM
release (:mod:`vfl.protocols.fm_release`) the coordinator sends every party MODEL_CHECK:

* ``release`` (frame 1, JSON, with the payload descriptors ``frames``: a noisy-gd run of many rounds records more
  messages than a header may describe): every message the release was assembled from, as the coordinator received
  it: each party's READY (public bounds), BLOCK (its noisy single-party blocks), ENC_REQUEST (the public stream
  header and Paillier key of each secure product) and SHARE (the two shares of each cross block). Each carries its
  producer's Ed25519 signature bound to the run's roster digest (:meth:`vfl.protocols.roster.Roster.seal`);
* ``settings``: the run's public settings (:class:`vfl.protocols.settings.RunSettings`);
* ``model`` (frame 0, JSON): the model document the coordinator will write (without signatures); the recorded
  messages' payloads travel packed in frame 2 (:func:`vfl.net.messages.pack_payloads`: a run has more of them than a
  message may carry frames).

The party (:func:`check_release`) checks every signature against its pinned keys, rebuilds the coordinator's side
from the settings and the roster's registrations (the rebuilt PLAN must have the digest of the plan this party
accepted), feeds it the recorded messages (the same checks the coordinator makes: owners, shapes, packed ranges,
product magnitudes), assembles and solves with the same deterministic code (:meth:`FMCoordinator.finish`; the
eigenvalue floor is selected from the release with a public seed) and builds the model file. The coefficients must
agree to :data:`W_RTOL`, the inference record to :data:`DERIVED_RTOL` and everything else in the document exactly,
else the party refuses (ERROR, the run fails, no model is written). Only then does it sign
:func:`vfl.models.modelio.model_document_digest` of the document (MODEL_SIGNATURE). The coordinator writes all
signatures into the file and sends it (RESULT); each party checks the signatures and stores the file
(``--model-out``, :func:`default_model_path`).

What a party learns from the release it checks is the noisy objective, post-processing of the DP release
(docs/privacy.md, "What a party learns from the model check").

The noisy-gd and (DP-)BCD runs end the same way, with another release and another re-derivation
(:mod:`vfl.net.round_check` passes ``rebuild`` to :func:`check_release`): one comparison, one signature, one
:func:`check_result`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vfl.exceptions import ProtocolError, VFLError
from vfl.models.modelio import FittedModel, model_document_digest
from vfl.net.coordinator import ALIGNMENT_NOTE, IDENTITY_NOTE, RECORDED, fm_model
from vfl.net.messages import Message, MessageType, unpack_payloads
from vfl.protocols.contracts import RegisterBody, Registration
from vfl.protocols.fm_release import FMCoordinator
from vfl.protocols.model_signing import verify_model_signatures
from vfl.protocols.roster import Roster, plan_digest
from vfl.protocols.settings import RunSettings
from vfl.secure.identity import SigningIdentity, canonical_json

__all__ = ["check_release", "check_result", "default_model_path", "W_RTOL",
           "UNCOMPARED", "Rebuild", "recorded_messages", "rebuild_phase", "record_run"]

#: a party's re-derivation of the model from a MODEL_CHECK, its roster and the run id (ProtocolError if it cannot)
Rebuild = Callable[[Message, Roster, str], FittedModel]

#: relative tolerance of the re-derived coefficients (the same code on the same release: equal up to BLAS rounding)
W_RTOL = 1e-9
#: fields of the model document compared within tolerance (derived from ``w``) or not at all (stamps)
UNCOMPARED = ("w", "coef", "coefficients", "intercept", "created", "vfl_version", "signatures")
#: fields derived from ``w`` by the public affine maps: they must be those of the document's own ``w`` (to
#: :data:`W_RTOL`), since readers of the file (``vfl report``, any JSON consumer) take them as the coefficients
DERIVED = ("coef", "coefficients", "intercept")
#: fields compared number by number to :data:`DERIVED_RTOL`: the inference record is a deterministic bootstrap (public
#: seed) of the release, equal on one machine, equal up to floating-point rounding across BLAS builds
NUMERIC = ("inference",)
DERIVED_RTOL = 1e-6


def _close(a: Any, b: Any, rtol: float = DERIVED_RTOL, atol: float = 1e-12) -> bool:
    """``a`` and ``b`` are the same JSON value, numbers within ``rtol`` (:data:`DERIVED_RTOL`) and ``atol``."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rtol, atol) for x, y in zip(a, b, strict=True))
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return bool(np.isclose(a, b, rtol=rtol, atol=atol))
    return _same(a, b)


def _same(a: Any, b: Any) -> bool:
    """The same JSON value, type included (``1``, ``1.0`` and ``true`` differ in the signed bytes)."""
    try:
        return canonical_json(a) == canonical_json(b)
    except VFLError:   # NaN or infinity in the claimed document
        return False


def recorded_messages(msg: Message, kinds: Sequence[str] = RECORDED) -> list[tuple[str, Message]]:
    """The recorded messages: each body from ``release`` (frame 1), its payloads unpacked from frame 2; every type
    one of ``kinds`` (the release of this party's mechanism)."""
    try:
        index = json.loads(msg.blob(1))
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("the model check's release is not JSON") from None
    if not isinstance(index, dict) or not isinstance(index.get("release"), list) or not isinstance(
            index.get("frames"), list):
        raise ProtocolError("the model check's release is malformed")
    payloads = unpack_payloads(index["frames"], msg.blob(2))
    items, pos = [], 0
    for item in index["release"]:
        if not isinstance(item, dict):
            raise ProtocolError("the model check's release is malformed")
        kind, count, party = item.get("type"), item.get("frames"), item.get("party")
        if kind not in kinds or not isinstance(count, int) or not 0 <= count <= len(payloads) - pos \
                or not isinstance(party, str) or not isinstance(item.get("body"), dict):
            raise ProtocolError("the model check's release is malformed")
        items.append((party, Message(MessageType(kind), dict(item["body"]), payloads[pos:pos + count],
                                     sender=party)))
        pos += count
    if pos != len(payloads):
        raise ProtocolError("the model check's release has payloads no message claims")
    return items


def rebuild_phase(msg: Message, roster: Roster, phase_of: Callable[[RunSettings, list[Registration]], Any]
                  ) -> tuple[RunSettings, list[Registration], Any]:
    """The coordinator's side (``phase_of(settings, registrations)``: the FM release, the noisy-gd rounds or the
    (DP-)BCD ring, as this party's own session is) rebuilt from the settings and the roster's signed
    registrations; its PLAN must be the plan this party accepted (same digest: run settings, mechanism, epsilon,
    delta and every plan field)."""
    try:
        settings = RunSettings(**msg.body["settings"])
    except TypeError as exc:
        raise ProtocolError(f"the model check's settings are malformed: {exc}") from None
    plan_body = roster.plan_body
    if settings.mechanism != plan_body.get("mechanism") or settings.n_parties != len(roster.entries):
        raise ProtocolError("the model check's settings are not those of this run")
    regs = []
    for entry in roster.entries:
        reg = Registration.of(b"", RegisterBody.from_body(entry["registration"], str(entry["party"])))
        reg.n_rows = int(plan_body["n_samples"])   # after the row alignment, if any
        regs.append(reg)
    try:
        phase = phase_of(settings, regs)
        rebuilt = phase.plan_messages()[int(plan_body["index"])].body
    except VFLError as exc:
        raise ProtocolError(f"the model check's settings do not give this run's plan: {exc}") from None
    if "max_message_bytes" in plan_body["params"]:   # the FM plan's frame limit, set by the coordinator's socket
        rebuilt["params"]["max_message_bytes"] = plan_body["params"]["max_message_bytes"]
    if plan_digest(rebuilt) != roster.plan:
        raise ProtocolError("the model check's settings do not reproduce the plan this party accepted; refusing to "
                            "sign the model")
    return settings, regs, phase


def _rebuild_model(msg: Message, roster: Roster, run: str) -> FittedModel:
    """Re-derive the model from the signed release (module docstring)."""
    settings, regs, phase = rebuild_phase(msg, roster, FMCoordinator)
    index = {r.name: i for i, r in enumerate(regs)}
    for party, item in recorded_messages(msg):
        if party not in index:
            raise ProtocolError(f"the model check's release holds a message of {party!r}, not a party of this run")
        roster.check_recorded(item.type.value, item.body, list(item.payload), party)
        phase.handle(index[party], item)
    if not phase.done:
        raise ProtocolError("the model check's release lacks blocks of this run")
    return record_run(fm_model(settings, regs, phase.finish(), run), roster, regs, run)


def record_run(model: FittedModel, roster: Roster, regs: list[Registration], run: str) -> FittedModel:
    """What the coordinator adds to every model file (:meth:`vfl.net.coordinator.Coordinator._note_alignment`):
    the signed roster, the row-alignment note and the no-identity note."""
    model.roster = {"run": run, "plan": roster.plan.hex(), "entries": roster.entries}
    if any(r.row_ids for r in regs):
        model.privacy_report.setdefault("notes", []).append(ALIGNMENT_NOTE.format(n=regs[0].n_rows))
    unsigned = [str(e.get("party")) for e in roster.entries if "auth" not in e]
    if unsigned:
        model.privacy_report.setdefault("notes", []).append(IDENTITY_NOTE.format(names=", ".join(unsigned)))
    return model


def check_release(msg: Message, roster: Roster, run: str, identity: SigningIdentity | None,
                  rebuild: Rebuild | None = None, w_rtol: float = W_RTOL) -> Message:
    """Party side: re-derive the model (``rebuild``; default: the FM release), compare it with the coordinator's
    document (coefficients to ``w_rtol``), sign its digest (module docstring). ProtocolError (one line, the run
    fails) if anything differs."""
    try:
        doc = json.loads(msg.blob(0))
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("the model check's model document is not JSON") from None
    if not isinstance(doc, dict):
        raise ProtocolError("the model check's model document is not a model")
    if "signatures" in doc:
        raise ProtocolError("the model to check already carries signatures")
    try:
        mine = (rebuild or _rebuild_model)(msg, roster, run)
        claimed = FittedModel.from_dict(doc)
    except ProtocolError:
        raise
    except VFLError as exc:
        raise ProtocolError(f"the model check's release does not re-derive a model: {exc}") from None
    if claimed.w.shape != mine.w.shape or not np.allclose(claimed.w, mine.w, rtol=w_rtol, atol=w_rtol * float(
            np.max(np.abs(mine.w), initial=1.0))):
        raise ProtocolError("the model's coefficients do not follow from the run's release; refusing to sign it")
    ours = json.loads(json.dumps(mine.to_dict(), allow_nan=False))   # as the document travelled: lists, not tuples
    differ = sorted(k for k in set(ours) | set(doc) if k not in UNCOMPARED and (
        (k in ours) != (k in doc) or not (_close(ours.get(k), doc.get(k)) if k in NUMERIC
                                          else _same(ours.get(k), doc.get(k)))))
    derived = json.loads(json.dumps({k: claimed.to_dict()[k] for k in DERIVED}, allow_nan=False))
    scale = float(np.max(np.abs(np.append(claimed.coef_, claimed.intercept_)), initial=1.0))
    differ += [k for k in DERIVED if not _close(derived[k], doc.get(k), W_RTOL, W_RTOL * scale)]
    if differ:
        raise ProtocolError(f"the model's {', '.join(differ)} differ from what the run's release gives; refusing "
                            "to sign it")
    digest = model_document_digest(doc)
    body: dict[str, Any] = {"digest": digest.hex()}
    if identity is not None:
        body["auth"] = identity.sign(digest)
    return Message(MessageType.MODEL_SIGNATURE, body)


def check_result(doc: dict, signed_digest: bytes | None, roster: Roster) -> FittedModel:
    """Party side, RESULT: the model is the one this party checked and signed, with every party's valid signature
    (under its pinned keys); without identities only the digest is compared."""
    model = FittedModel.from_dict(doc)
    if signed_digest is None or model.document_digest() != signed_digest:
        raise ProtocolError("the released model is not the one this party checked and signed")
    if roster.identity is not None:
        verify_model_signatures(model, pinned=roster.pinned, own=(roster.name, roster.identity.public_hex))
    return model


def default_model_path(ledger_path: str | Path | None, name: str, run: str) -> Path | None:
    """Where a party stores the signed model when no ``--model-out`` is given: ``model-NAME-RUN8.json`` next to its
    privacy ledger (None without a ledger)."""
    if ledger_path is None:
        return None
    return Path(ledger_path).with_name(f"model-{name}-{run[:8]}.json")
