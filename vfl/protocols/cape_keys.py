"""Signed Diffie-Hellman values for the CAPE sites (capeFM, capePCA + capeDJICA): the aggregator relays, never forges.

The CAPE rounds (:mod:`vfl.protocols.cape_aggregation`) mask each site's zero-sum noise share under pairwise keys
agreed from Diffie-Hellman values that the aggregator relays (Bonawitz et al. 2017, §4 "masking"). Without
authentication a hostile aggregator can send site s a table in which every other site's value is its own: it then
knows every pair mask of s, unmasks s's share e^_s, and after the release ``Lambda_s + e_s + g_s`` is left with s's
statistic under the small independent noise g_s alone (variance tau^2/S). Bonawitz et al. (2017, §6.2, the active
adversary) sign the key advertisements with long-term identities; so does this module, with the Ed25519 identities
of the vertical parties (:mod:`vfl.secure.identity`, ``vfl keys``, RFC 8032):

1. **Plan.** The aggregator's CAPE_PLAN names the sites in index order (``sites``). Before it sends anything a site
   checks that the list names every site once, itself at its own index, and (with identities) only sites it pinned
   (:class:`CapeKeyBook`).
2. **Key.** Site s signs ``H("vfl cape dh key", run id, plan digest, round id, s, name_s, A_s)``
   (:func:`key_digest`): the run (the aggregator's WELCOME), the digest of the plan body every site receives (the
   CAPE_PLAN body without the addressee's ``index``, :func:`vfl.protocols.roster.plan_digest`), the CAPE round,
   its index and name, and its fresh value A_s = g^{a_s} (a_s is drawn afresh for every round, so A_s is itself
   the round's nonce). The signature travels as ``auth`` of its ``key`` message.
3. **Table.** The aggregator relays every site's signature with the table of values (``auths`` of ``keys``).
4. **Check.** Before masking anything, site s verifies every other entry t against the *pinned* key of the plan's
   name_t over (run, s's own plan digest, this round, t, name_t, A_t) and refuses the run (:class:`IdentityError`,
   one line) on a missing or bad signature. So a substituted value, a value signed for another run, plan or round,
   a value moved to another index, an invented or unpinned site, or a duplicated site never reaches
   :meth:`vfl.secure.aggregation.SecAggSite.receive_public_keys`, and no ``masked`` message is sent.

What remains: the aggregator can still drop or delay messages (the run then stops, no model) and it sees the final
noisy releases, as the privacy report states. A site run without identities (``--insecure-no-identity``, loopback
experiments) signs nothing and checks only step 1's structure; sites with identities refuse its unsigned value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vfl.exceptions import IdentityError, ProtocolError
from vfl.protocols.cape_aggregation import PUBLIC_KEY_BYTES, CapeMessage
from vfl.protocols.roster import plan_digest
from vfl.secure.identity import PinnedKeys, SigningIdentity, digest_of

__all__ = ["KEY_TAG", "key_digest", "plan_sites", "CapeKeyBook", "SignedCapeSite"]

#: domain-separation tag of a CAPE Diffie-Hellman signature (no other vfl signature uses it)
KEY_TAG = "vfl cape dh key"


def key_digest(run: str, plan: bytes, round_id: int, index: int, name: str, value: bytes) -> bytes:
    """What a site's signature on its Diffie-Hellman value covers: the tag, the run id, the plan digest, the round
    id, the site's index and name and its public value (256 bytes, big-endian)."""
    return digest_of(KEY_TAG, run, plan, int(round_id), int(index), name, value)


def plan_sites(plan_body: dict[str, Any], name: str) -> tuple[list[str], int]:
    """The plan's site names in index order and this site's index; ProtocolError unless the list names every site
    once and ``name`` at its own index."""
    sites, index = plan_body.get("sites"), plan_body.get("index")
    if not isinstance(sites, list) or len(sites) < 2 or not all(isinstance(s, str) for s in sites):
        raise ProtocolError("the CAPE plan names no sites; this site needs the site names to check the keys it is "
                            "sent (an aggregator older than signed Diffie-Hellman values?)")
    twice = next((s for i, s in enumerate(sites) if s in sites[:i]), None)
    if twice is not None:
        raise IdentityError(f"the CAPE plan lists site {twice!r} twice; refusing the run")
    if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(sites)):
        raise ProtocolError(f"the CAPE plan gives this site an invalid index {index!r}")
    if sites[index] != name:
        raise IdentityError(f"the CAPE plan names {sites[index]!r} at this site's index {index}, not {name!r}; "
                            "refusing the run")
    return list(sites), index


class CapeKeyBook:
    """One site's signing and checking of the Diffie-Hellman values of a run (module docstring, steps 1-4).

    ``plan_body``: the CAPE_PLAN body as received (``index``, ``sites``, the plan); ``run``: the aggregator's run id;
    ``identity``/``pinned``: this site's Ed25519 identity and the pinned keys of its co-sites (None, None: no
    identities, ``--insecure-no-identity``).
    """

    def __init__(self, *, name: str, run: str, plan_body: dict[str, Any], identity: SigningIdentity | None,
                 pinned: PinnedKeys | None) -> None:
        if (identity is None) != (pinned is None):
            raise ValueError("a signing identity and pinned keys go together")
        self.name, self.run, self.identity, self.pinned = name, str(run), identity, pinned
        self.sites, self.index = plan_sites(plan_body, name)
        if pinned is not None:
            for site in self.sites:   # an invented or unpinned site is refused before this site sends anything
                if site not in pinned:
                    raise IdentityError(f"site {site!r} has no pinned identity (no {site}.sign.pub in this site's "
                                        "identity directory); refusing the run")
        self.plan = plan_digest(plan_body)

    @property
    def signed(self) -> bool:
        return self.identity is not None

    def seal(self, msg: CapeMessage) -> CapeMessage:
        """A ``key`` message with this site's signature (``auth``); every other message unchanged."""
        if msg.kind != "key" or self.identity is None:
            return msg
        if msg.site != self.index:
            raise ProtocolError(f"site {self.name} would send a key for index {msg.site}, its index is {self.index}")
        value = _value_bytes(msg.array)
        auth = self.identity.sign(key_digest(self.run, self.plan, msg.body["round"], self.index, self.name, value))
        return CapeMessage(msg.kind, msg.site, {**msg.body, "auth": auth}, msg.array)

    def check(self, msg: CapeMessage) -> None:
        """A ``keys`` table: every other site's value carries its pinned signature for this run, plan and round
        (IdentityError naming the site otherwise); other messages pass. Without identities: the table's shape."""
        if msg.kind != "keys":
            return
        S = len(self.sites)
        table = msg.array
        if not isinstance(table, np.ndarray) or table.dtype != np.uint8 or table.shape != (S, PUBLIC_KEY_BYTES):
            raise ProtocolError(f"the key table must be uint8 of shape ({S}, {PUBLIC_KEY_BYTES}) for the plan's {S} "
                                "sites")
        if self.pinned is None:
            return
        auths = msg.body.get("auths")
        if not isinstance(auths, list) or len(auths) != S:
            raise IdentityError(f"the key table carries no signature list for the plan's {S} sites; refusing it "
                                "before masking anything")
        round_id = msg.body.get("round")
        if not isinstance(round_id, int) or isinstance(round_id, bool):
            raise ProtocolError(f"the key table names no round ({round_id!r})")
        for t, site in enumerate(self.sites):
            if t == self.index:   # its own value: SecAggSite refuses an altered copy
                continue
            digest = key_digest(self.run, self.plan, round_id, t, site, table[t].tobytes())
            self.pinned.verify(site, digest, auths[t], f"the Diffie-Hellman value of site {t} of round {round_id}")


def _value_bytes(arr: Any) -> bytes:
    if not isinstance(arr, np.ndarray) or arr.dtype != np.uint8 or arr.shape != (PUBLIC_KEY_BYTES,):
        raise ProtocolError(f"a Diffie-Hellman value is {PUBLIC_KEY_BYTES} bytes")
    return arr.tobytes()


class SignedCapeSite:
    """A CAPE site session (:class:`~vfl.protocols.cape_aggregation.CapeFMSite`,
    :class:`~vfl.protocols.cape_djica_rounds.CapeICASite`, ...) behind its :class:`CapeKeyBook`: every incoming
    message is checked before the session sees it and every outgoing ``key`` is signed. The networked site
    (:class:`vfl.net.site.SiteNode`) and the in-process tests use the same object."""

    def __init__(self, session: Any, book: CapeKeyBook) -> None:
        self.session, self.book = session, book

    def handle(self, msg: CapeMessage) -> list[CapeMessage]:
        self.book.check(msg)
        return self.seal_all(self.session.handle(msg))

    def seal_all(self, messages: Sequence[CapeMessage]) -> list[CapeMessage]:
        return [self.book.seal(m) for m in messages]

    def __getattr__(self, name: str) -> Any:   # plan_summary, plan_spend, ... of the wrapped session
        return getattr(self.session, name)
