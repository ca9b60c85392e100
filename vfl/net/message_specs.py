"""One declaration per message of the vfl wire protocol: :class:`MessageSpec` (issue 30).

Each message type is declared once, here: its body fields (name -> required?, check), the payload frame kinds it
may carry, who sends it to whom, its protocol family, one line of documentation and, where the protocols parse it
into a typed object, that body class. Everything else is derived from :data:`SPECS`:

* the codec's body and frame checks (:data:`vfl.net.messages.SCHEMAS`, :data:`vfl.net.messages.FRAME_KINDS`);
* the set of CAPE round messages the CAPE drivers hand to the protocol objects (:data:`CAPE_ROUND_TYPES`);
* the message table of docs/runtime.md (:func:`markdown_table`; ``python -m vfl.net.message_specs --write``
  rewrites it, tests/net/test_message_specs.py checks it);

and the typed bodies of :mod:`vfl.protocols.contracts` (REGISTER, PLAN, READY) are tested against their spec.
The byte format does not depend on this module's layout: a spec only states what :mod:`vfl.net.messages` checks.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from vfl.data.preprocessing import MAX_CATEGORIES, MAX_CATEGORY_CHARS
from vfl.protocols.contracts import PlanBody, ReadyBody, RegisterBody
from vfl.validation import is_name

__all__ = ["MessageType", "MessageSpec", "SPECS", "SPEC", "CAPE_ROUND_TYPES", "MAX_ICA_DIMS", "MAX_SCORE_IDS",
           "markdown_table", "FAMILIES"]

MAX_ICA_DIMS = 100_000  # a capeDJICA site's data dimension D (REGISTER ``dims``); D^2 words per capePCA message
MAX_SCORE_IDS = 10_000_000  # IDs in one scoring query (the hub's --max-query-ids is lower)


class MessageType(str, Enum):
    """Named message types; the value is what travels in the header."""

    REGISTER = "register"
    WELCOME = "welcome"
    PLAN = "plan"
    READY = "ready"
    ENC_REQUEST = "enc_request"
    ENC_CHUNK = "enc_chunk"
    CREDIT = "credit"
    MASKED_RESPONSE = "masked_response"
    SHARE = "share"
    BLOCK = "block"
    BCD_REMAINDER = "bcd_remainder"
    BCD_COEF = "bcd_coef"
    BCD_STOP = "bcd_stop"
    RESULT = "result"
    MODEL_CHECK = "model_check"
    MODEL_SIGNATURE = "model_signature"
    HEARTBEAT = "heartbeat"
    ABORT = "abort"
    ERROR = "error"
    CAPE_PLAN = "cape_plan"
    CAPE_KEY = "cape_key"
    CAPE_KEYS = "cape_keys"
    CAPE_MASKED = "cape_masked"
    CAPE_SUM = "cape_sum"
    CAPE_RELEASE = "cape_release"
    CAPE_SUBSPACE = "cape_subspace"
    CAPE_STATE = "cape_state"
    PSI_START = "psi_start"
    PSI_POINTS = "psi_points"
    PSI_RESULT = "psi_result"
    ROSTER_ENTRY = "roster_entry"
    ROSTER = "roster"
    SCORE_PLAN = "score_plan"
    SCORE_KEY = "score_key"
    SCORE_KEYS = "score_keys"
    SCORE_READY = "score_ready"
    SCORE_QUERY = "score_query"
    SCORE_PARTIAL = "score_partial"
    SCORE_DONE = "score_done"
    GD_ROUND = "gd_round"
    GD_REQUEST = "gd_request"
    GD_RESPONSE = "gd_response"
    GD_SHARE = "gd_share"


# ------------------------------------------------------------------ field checks (JSON types and ranges)
Check = Callable[[Any], bool]
_HEX_RE = re.compile(r"^[0-9a-f]*$")


def _is_str(limit: int = 4096) -> Check:
    return lambda v: isinstance(v, str) and len(v) <= limit


def _is_int(lo: int = 0, hi: int = 2**62) -> Check:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


_is_name = is_name


def _is_opt(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _is_list(check: Check, limit: int = 100_000) -> Check:
    return lambda v: isinstance(v, list) and len(v) <= limit and all(check(x) for x in v)


def _is_dict(v: Any) -> bool:
    return isinstance(v, dict)


def _is_hex(length: int) -> Check:
    return lambda v: isinstance(v, str) and len(v) == length and bool(_HEX_RE.fullmatch(v))


def _is_text(limit: int) -> Check:
    """A string an operator may be shown as is: printable (no escape code, newline or bidirectional override)."""
    return lambda v: isinstance(v, str) and len(v) <= limit and v.isprintable()


_FEATURE = _is_text(256)   # column names reach terminals (the coordinator's coefficient table; review6)
_CATEGORY = _is_text(MAX_CATEGORY_CHARS)


def _is_preprocessing(v: Any) -> bool:
    """REGISTER's declared preprocessing, as :meth:`vfl.data.preprocessing.Preprocessing.to_record` writes it and
    nothing else: ``inputs`` (raw column names), ``categories`` (column -> category names), ``impute`` (column ->
    a finite number or a category name). Every name is printable text (:func:`_is_text`): the record is kept as
    sent (relayed in PSI_START and the roster, written to the model file), so no other key or value may ride in it."""
    if not (isinstance(v, dict) and set(v) == {"inputs", "categories", "impute"}):
        return False
    cats, imp = v["categories"], v["impute"]
    return (_is_list(_FEATURE, 100_000)(v["inputs"]) and isinstance(cats, dict) and isinstance(imp, dict)
            and all(_FEATURE(c) and _is_list(_CATEGORY, MAX_CATEGORIES)(ks) for c, ks in cats.items())
            and all(_FEATURE(c) and (_is_num(x) or _CATEGORY(x)) for c, x in imp.items()))


def _is_pairs(v: Any) -> bool:
    """A site's REGISTER ``bounds``: ``{"pairs": [[lo, hi], ...]}`` of finite numbers, nothing else."""
    return (isinstance(v, dict) and set(v) == {"pairs"}
            and _is_list(lambda p: _is_list(_is_num, 2)(p) and len(p) == 2, 100_000)(v["pairs"]))


_BLOCK = _is_str(64)
_KEY = _is_hex(64)    # an Ed25519 public key or a sha256 digest, hex (vfl.secure.identity)
_AUTH = _is_hex(128)  # an Ed25519 signature, hex: the sender's, end to end (vfl.protocols.roster)
_ROUND = _is_int(0, 2**63 - 1)
_REQ, _OPT = True, False
_RELAYED = {"block": (_REQ, _BLOCK), "to": (_REQ, _is_name), "origin": (_OPT, _is_opt(_is_name))}
#: the addressee of a relayed noisy-gradient message (required by the party's roster check, optional in-process)
_GD_RELAYED = {"to": (_OPT, _is_name), "origin": (_OPT, _is_opt(_is_name))}
_FAILURE = {"reason": (_REQ, _is_str(2048)), "error": (_REQ, _is_str(64))}

#: protocol families, in the order of the docs table
FAMILIES = ("common", "vertical", "capeFM", "capeDJICA", "scoring")


@dataclass(frozen=True)
class MessageSpec:
    """One message type: body ``fields`` (name -> (required?, check); any other field is refused), ``frames``
    (the frame-kind tuples it may carry, any one of them; ``None``: any frames within the general limits),
    ``sender -> receiver``, its ``family``, a one-line ``doc`` and the typed ``body`` class the protocols parse
    it into (``None``: read as a checked dict)."""

    type: MessageType
    family: str
    sender: str
    receiver: str
    fields: dict[str, tuple[bool, Check]]
    frames: tuple[tuple[str, ...], ...] | None
    doc: str
    body: type | None = None


_NONE: tuple[tuple[str, ...], ...] = ((),)
_ARRAY: tuple[tuple[str, ...], ...] = (("array",),)
_BYTES: tuple[tuple[str, ...], ...] = (("bytes",),)
M = MessageType
_S = MessageSpec

SPECS: tuple[MessageSpec, ...] = (
    # -------------------------------------------------------------- every family
    _S(M.REGISTER, "common", "member", "hub", {
        "name": (_REQ, _is_name), "n_rows": (_REQ, _is_int(1)), "features": (_REQ, _is_list(_FEATURE, 100_000)),
        "label_owner": (_REQ, _is_bool), "row_ids": (_OPT, _is_bool), "order": (_OPT, _is_opt(_is_int(0, 10_000))),
        "bounds": (_OPT, _is_opt(_is_pairs)), "label_bounds": (_OPT, _is_opt(_is_list(_is_num, 2))),
        "bounds_from_data": (_OPT, _is_bool), "role": (_OPT, _is_opt(_is_name)),
        "seeded": (_OPT, _is_bool),  # cape-fm site: its noise is seeded (`vfl site --seed`), flagged in the report
        "dims": (_OPT, _is_int(1, MAX_ICA_DIMS)),  # capeDJICA site: its data dimension D
        "label": (_OPT, _is_opt(_FEATURE)),        # the label owner's label column name (for the model file)
        "preprocessing": (_OPT, _is_opt(_is_preprocessing)),  # declared dummies/imputation, printable names
        "identity": (_OPT, _KEY), "auth": (_OPT, _AUTH)}, _NONE,
       "name, rows, feature names, label owner? (label name), row IDs given?, declared preprocessing, role "
       "(site, djica-site, scorer), its Ed25519 identity and signature over all of it", RegisterBody),
    _S(M.WELCOME, "common", "hub", "member", {"run": (_REQ, _is_str(32))}, _NONE,
       "the run id (every later message carries it)"),
    _S(M.RESULT, "common", "hub", "member", {"model": (_REQ, _is_dict)}, ((), ("array", "array", "array")),
       "the released model (capeDJICA: unmixing, bias, eigenvalues as frames)"),
    _S(M.HEARTBEAT, "common", "either", "either", {}, _NONE, "liveness while the other side computes"),
    _S(M.ABORT, "common", "hub", "member", dict(_FAILURE), _NONE, "the run ended with an error; no model is released"),
    _S(M.ERROR, "common", "member", "hub", dict(_FAILURE), _NONE, "the member failed; the hub aborts the run"),
    # -------------------------------------------------------------- vertical (coordinator and parties)
    _S(M.PSI_START, "vertical", "coordinator", "party", {
        "index": (_REQ, _is_int(0, 10_000)), "parties": (_REQ, _is_int(1, 10_001)),
        "registrations": (_REQ, _is_list(_is_dict, 10_001))}, _NONE,
       "(--id runs) index and K of the row alignment, every party's signed REGISTER"),
    _S(M.PSI_POINTS, "vertical", "party", "coordinator (relayed round the ring)", {
        "origin": (_REQ, _is_int(0, 10_000)), "hops": (_REQ, _is_int(1, 10_001)), "offset": (_REQ, _is_int(0)),
        "auth": (_OPT, _AUTH)}, _BYTES,
       "one chunk of a list of blinded ID points (from point ``offset``), signed by the sender; fully blinded: kept"),
    _S(M.PSI_RESULT, "vertical", "coordinator", "party", {"n_common": (_REQ, _is_int(0)), "offset": (_REQ, _is_int(0))},
       _ARRAY, "one chunk (from ``offset``) of the positions of the party's common rows in the agreed order"),
    _S(M.PLAN, "vertical", "coordinator", "party", {
        "index": (_REQ, _is_int(0, 10_000)), "parties": (_REQ, _is_list(_is_dict, 10_000)),
        "model": (_REQ, _is_str(16)), "mechanism": (_REQ, _is_str(32)), "params": (_REQ, _is_dict),
        "n_samples": (_REQ, _is_int(1)), "label_owner": (_REQ, _is_int(0, 10_000))}, _NONE,
       "party order, model, mechanism, privacy parameters, key size", PlanBody),
    _S(M.ROSTER_ENTRY, "vertical", "party", "coordinator", {
        "party": (_REQ, _is_name), "plan": (_REQ, _KEY), "registration": (_REQ, _is_dict),
        "paillier": (_REQ, _is_opt(_KEY)), "nonce": (_REQ, _is_hex(32)), "auth": (_OPT, _AUTH)}, _NONE,
       "its signed registration, the plan's digest, its Paillier key's fingerprint, its signature over them"),
    _S(M.ROSTER, "vertical", "coordinator", "party", {"entries": (_REQ, _is_list(_is_dict, 10_000))}, _NONE,
       "every entry in plan order; each party verifies it before anything data-dependent"),
    _S(M.READY, "vertical", "party", "coordinator", {
        "label_bounds": (_OPT, _is_opt(_is_list(_is_num, 2))), "label_bounds_from_data": (_OPT, _is_bool),
        "seeded": (_OPT, _is_bool), "bounds": (_OPT, _is_opt(_is_dict)), "bounds_from_data": (_OPT, _is_bool),
        "auth": (_OPT, _AUTH)}, _NONE,   # signed for the model check at the end of the run (vfl.net.model_check)
       "data prepared; public column bounds, the label owner's public label bounds", ReadyBody),
    _S(M.ENC_REQUEST, "vertical", "encryptor", "responder (relayed)",
       {**_RELAYED, "wire": (_REQ, _is_dict), "auth": (_OPT, _AUTH)}, _BYTES,
       "public key (frame) + product stream header (body)"),
    _S(M.CREDIT, "vertical", "responder", "encryptor (relayed)",
       {**_RELAYED, "upto": (_REQ, _is_int(1, 10_000_000)), "auth": (_OPT, _AUTH)}, _NONE,
       "send chunks with index < upto"),
    _S(M.ENC_CHUNK, "vertical", "encryptor", "responder (relayed)",
       {**_RELAYED, "wire": (_REQ, _is_dict), "auth": (_OPT, _AUTH)}, _BYTES,
       "one chunk of packed Paillier ciphertexts"),
    _S(M.MASKED_RESPONSE, "vertical", "responder", "encryptor (relayed)",
       {**_RELAYED, "wire": (_REQ, _is_dict), "auth": (_OPT, _AUTH)}, _BYTES,
       "masked, noised products (inside the ciphertexts)"),
    _S(M.SHARE, "vertical", "party", "coordinator", {"block": (_REQ, _BLOCK), "auth": (_OPT, _AUTH)}, (("ints",),),
       "its additive share of a cross block (+ its local offset)"),
    _S(M.BLOCK, "vertical", "party", "coordinator", {"block": (_REQ, _BLOCK), "auth": (_OPT, _AUTH)}, _ARRAY,
       "a single-party block with the owner's noise added"),
    _S(M.MODEL_CHECK, "vertical", "coordinator", "party", {"settings": (_REQ, _is_dict)}, None,
       "the run settings; the model, every released input as received and their payloads (3 frames); each party "
       "re-derives the model"),
    _S(M.MODEL_SIGNATURE, "vertical", "party", "coordinator", {"digest": (_REQ, _KEY), "auth": (_OPT, _AUTH)},
       None, "the model file's digest and the party's Ed25519 signature over it"),
    _S(M.BCD_REMAINDER, "vertical", "party", "next party (relayed)", {
        "round": (_REQ, _is_int(0, 1_000_000)), "to": (_REQ, _is_name), "origin": (_OPT, _is_opt(_is_name)),
        "auth": (_OPT, _AUTH)}, _ARRAY, "DP-BCD residual of the ring"),
    _S(M.BCD_COEF, "vertical", "party", "coordinator", {
        "status": (_REQ, _is_str(64)), "reason": (_OPT, _is_opt(_is_str(1024))),
        "rounds_run": (_OPT, _is_int(0, 1_000_000)), "auth": (_OPT, _AUTH)}, ((), ("array",)),
       "a party's final DP-BCD coefficients (\"completed\"; \"converged\" when --tol stops the ring) and the rounds "
       "they ran (signed)"),
    _S(M.BCD_STOP, "vertical", "coordinator", "party", {"rounds_run": (_REQ, _is_int(0, 1_000_000))}, _NONE,
       "the ring stopped early (--tol): send your coefficients now"),
    # -------------------------------------------------------------- capeFM (and the rounds capeDJICA reuses)
    _S(M.CAPE_PLAN, "capeFM", "aggregator", "site", {
        "index": (_REQ, _is_int(0, 10_000)), "plan": (_REQ, _is_dict),
        "fit_intercept": (_OPT, _is_bool),  # capeFM plans carry it, capeDJICA plans do not
        "sites": (_OPT, _is_list(_is_name, 10_001))}, None,  # site names by index (cape_keys)
       "site index, the site names by index and the public plan (capeDJICA too)"),
    _S(M.CAPE_KEY, "capeFM", "site", "aggregator", {"round": (_REQ, _ROUND), "auth": (_OPT, _AUTH)}, None,
       "Diffie-Hellman public value (uint8[256]) and its Ed25519 signature"),
    _S(M.CAPE_KEYS, "capeFM", "aggregator", "site",
       {"round": (_REQ, _ROUND), "auths": (_OPT, _is_list(_is_opt(_AUTH), 10_001))}, None,
       "every site's public value (uint8[S, 256]) and signature, checked against pinned identities"),
    _S(M.CAPE_MASKED, "capeFM", "site", "aggregator", {"round": (_REQ, _ROUND)}, None,
       "pairwise-masked noise share (uint64[L])"),
    _S(M.CAPE_SUM, "capeFM", "aggregator", "site", {"round": (_REQ, _ROUND)}, None,
       "sum of the masked shares = sum of the noise shares (uint64[L])"),
    _S(M.CAPE_RELEASE, "capeFM", "site", "aggregator", {"round": (_REQ, _ROUND)}, None,
       "noisy coefficients (float64[L]); capeDJICA round j: noisy Delta W_s, Delta b_s"),
    # -------------------------------------------------------------- capeDJICA
    _S(M.CAPE_SUBSPACE, "capeDJICA", "aggregator", "site", {"round": (_REQ, _ROUND)}, _ARRAY,
       "the released top-K eigenvectors and eigenvalues (float64[D K + K])"),
    _S(M.CAPE_STATE, "capeDJICA", "aggregator", "site", {"round": (_REQ, _ROUND)}, _ARRAY,
       "round j: W, b, learning rate (float64[K^2 + K + 1])"),
    # -------------------------------------------------------------- federated scoring
    _S(M.SCORE_PLAN, "scoring", "hub", "serving party", {
        "index": (_REQ, _is_int(0, 10_000)), "parties": (_REQ, _is_list(_is_name, 10_000)),
        "session": (_REQ, _is_hex(32)), "model": (_REQ, _KEY), "max_ids": (_REQ, _is_int(1, MAX_SCORE_IDS)),
        "precision_bits": (_REQ, _is_int(8, 52))}, _NONE,
       "index, serving parties, session id, model digest, --max-query-ids"),
    _S(M.SCORE_KEY, "scoring", "serving party", "hub", {"index": (_REQ, _is_int(0, 10_000)), "auth": (_OPT, _AUTH)},
       _BYTES, "Diffie-Hellman public value (256 bytes), signed with the party's Ed25519 key"),
    _S(M.SCORE_KEYS, "scoring", "hub", "serving party", {"entries": (_REQ, _is_list(_is_dict, 10_000))}, _NONE,
       "every party's signed public value (relayed)"),
    _S(M.SCORE_READY, "scoring", "serving party", "hub", {}, _NONE,
       "co-parties' keys verified against the pinned identities"),
    _S(M.SCORE_QUERY, "scoring", "hub", "serving party",
       {"round": (_REQ, _is_int(1, 2**62)), "count": (_REQ, _is_int(1, MAX_SCORE_IDS))}, _BYTES,
       "round r: the query's normalised IDs (uint32 lengths, then UTF-8)"),
    _S(M.SCORE_PARTIAL, "scoring", "serving party", "hub",
       {"round": (_REQ, _is_int(1, 2**62)), "count": (_REQ, _is_int(1, MAX_SCORE_IDS))}, _ARRAY,
       "round r: pairwise-masked partial scores, missing flags, check word (uint64[2 count + 1])"),
    _S(M.SCORE_DONE, "scoring", "hub", "serving party", {"queries": (_REQ, _is_int(0))}, _NONE,
       "the service ended"),
    # noisy-gradient rounds (vfl.protocols.gd_rounds, run by the drivers through vfl.protocols.gd_phase)
    _S(M.GD_ROUND, "vertical", "coordinator", "party",
       {"t": (_REQ, _is_int(0, 1_000_000)), "w": (_REQ, _is_list(_is_num, 100_000))}, _NONE,
       "round t: the public iterate w_t (refused outside the plan's rounds or the public ball)"),
    _S(M.GD_REQUEST, "vertical", "party", "party (relayed)",
       {"t": (_REQ, _is_int(0, 1_000_000)), "w_digest": (_REQ, _KEY), "wire": (_REQ, _is_dict),
        "auth": (_OPT, _AUTH), **_GD_RELAYED}, (("bytes", "bytes"),),
       "the encryptor's public key and its one-column ciphertexts Enc(v_l / b), with the digest of w_t"),
    _S(M.GD_RESPONSE, "vertical", "party", "party (relayed)",
       {"t": (_REQ, _is_int(0, 1_000_000)), "wire": (_REQ, _is_dict), "auth": (_OPT, _AUTH), **_GD_RELAYED}, _BYTES,
       "the masked product for the encryptor"),
    _S(M.GD_SHARE, "vertical", "party", "coordinator",
       {"t": (_REQ, _is_int(0, 1_000_000)), "role": (_REQ, _is_str(16)), "auth": (_OPT, _AUTH)}, (("ints",),),
       "a party's packed share of the noisy gradient block (its own noise draw folded in)"),
)

#: the spec of each type
SPEC: dict[MessageType, MessageSpec] = {s.type: s for s in SPECS}
if len(SPEC) != len(SPECS) or set(SPEC) != set(MessageType) or {s.family for s in SPECS} - set(FAMILIES):
    raise ImportError("vfl.net.message_specs: every MessageType needs exactly one MessageSpec of a known family")

#: the CAPE round messages a CAPE driver hands to the protocol objects (the plan is built by the driver)
CAPE_ROUND_TYPES = frozenset(s.type for s in SPECS if s.family in ("capeFM", "capeDJICA")
                             and s.type is not MessageType.CAPE_PLAN)

DOCS_BEGIN = "<!-- message table: generated by `python -m vfl.net.message_specs --write`; do not edit -->"
DOCS_END = "<!-- end of message table -->"
DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"


def _frames_text(frames: tuple[tuple[str, ...], ...] | None) -> str:
    if frames is None:
        return "any"
    return " or ".join(", ".join(kinds) if kinds else "none" for kinds in frames)


def markdown_table() -> str:
    """The docs table of every message type, family by family, from :data:`SPECS`."""
    rows = ["| family | message | from -> to | body fields (* required) | frames | content |",
            "|---|---|---|---|---|---|"]
    for family in FAMILIES:
        for s in (s for s in SPECS if s.family == family):
            fields = ", ".join(f"{k}{'*' if req else ''}" for k, (req, _) in s.fields.items()) or "-"
            rows.append(f"| {family} | {s.type.name} | {s.sender} -> {s.receiver} | {fields} | "
                        f"{_frames_text(s.frames)} | {s.doc} |")
    return "\n".join(rows)


def docs_block() -> str:
    """The generated block as it stands in docs/runtime.md (markers included)."""
    return f"{DOCS_BEGIN}\n{markdown_table()}\n{DOCS_END}"


def _write_docs(path: Path = DOCS_PATH) -> None:
    text = path.read_text(encoding="utf-8")
    start, end = text.index(DOCS_BEGIN), text.index(DOCS_END) + len(DOCS_END)
    path.write_text(text[:start] + docs_block() + text[end:], encoding="utf-8")


if __name__ == "__main__":   # pragma: no cover - a maintainer's command
    if sys.argv[1:] == ["--write"]:
        _write_docs()
    else:
        print(markdown_table())
