"""Noisy-gradient rounds across two parties, both sides, in protocol order (Bassily, Smith & Thakurta 2014).

The networked form of :mod:`vfl.privacy.gradient_release`. Two parties, A and the label owner B, hold the column
blocks X_A and X_B of the public l2 domain (party k's rows within its public radius r_k, sum_k r_k^2 <= 1). The
gradient of the FM objective is, per block k,

    linear:   g_k(w) = (2/N) X_k^T (X w - y)            = c sum_l X_k^T v_l,  c = 2/N,  v_l = X_l w_l  (- y at B)
    logistic: g_k(w) = (1/N) X_k^T (X w / 4 + 1/2 - y) = c sum_l X_k^T v_l,  c = 1/N,  v_l = X_l w_l / 4 (+ 1/2 - y)

so one round needs **one column per cross block**: the party l holding w_l computes v_l (an N-vector, private),
and a packed-Paillier secure product (:mod:`vfl.secure.products`) gives v_l^T X_k for the other party k.

One round t (coordinator :class:`GDCoordinator`, parties :class:`GDParty`; both socket-free):

1. GD_ROUND (coordinator -> both): t and the public iterate w_t. A party refuses a round the plan does not have
   (t must be the next round, t < T) and a w_t outside the public ball ||w|| <= R **before** anything computed
   from its data leaves it: the operand bound below, and so the sensitivity, hold only inside the ball.
2. GD_REQUEST (each party l, relayed to the other): Enc(v_l / b), b the public bound of every |v_l| (R r_l, plus 1
   linear / 1/2 logistic at B), under l's own key, with the digest of the w_t it was computed at; the responder
   refuses a request made at another iterate than its own (the sensitivity needs one w_t in the ball, not two
   halves of different ones). Across the network the request must carry its sender's end-to-end signature
   (``auth``, as the matrix release's relayed messages), or the coordinator could rewrite the digest.
3. GD_RESPONSE + GD_SHARE (responder k): the masked product and k's packed share, into which k folds its own term
   X_k^T v_k / b_l and its noise draw N(0, sigma^2) (in gradient units); the response is relayed to l.
4. GD_SHARE (encryptor l): its decrypted share plus its own noise draw N(0, sigma^2) (two-sided noise, as for the
   matrix release's cross blocks: :func:`vfl.privacy.fixed_point.cross_block_noise`).
5. The coordinator combines the two shares of each product (range-checked,
   :func:`vfl.secure.products.combine_packed_shares`): g~_k = c b_l (v_l^T X_k + X_k^T v_k + e_k + e_l), then
   w_{t+1} = Pi_R(w_t - eta g~) and the next GD_ROUND; after T rounds the average iterate is the model.

**Privacy.** Each party draws the full per-round sigma of :class:`~vfl.privacy.gradient_release.GradientRelease`
on every gradient coordinate, so the released g~ has noise variance 2 sigma^2; a party knows its own draws, so
against either party the unknown noise has variance sigma^2. sigma is calibrated (``party_radii`` of the release,
required here) to Delta* = max(Delta_A, Delta_B, Delta/sqrt(2)), where Delta_P bounds the change of P's part of a
row whatever operand |v_Q / b| <= 1 the co-party Q encrypts and whatever rows ||z|| <= r_Q it answers with
(:func:`~vfl.privacy.gradient_release.party_sensitivity`), so the calibrated (epsilon, delta) holds against either
party even if the other one does not encrypt X_Q w_Q; against the coordinator, which sees exactly g~ (one sum per
block, never the terms), the T rounds are one Gaussian mechanism with mu = sqrt(T) max(Delta, Delta_A, Delta_B) /
(sqrt(2) sigma), a smaller epsilon. Every iterate is post-processing of g~. Not covered: an operand a crafted
ciphertext puts beyond |v / b| <= 1 at some row while the sum still passes the slot and magnitude checks
(:func:`product_magnitude_limit` allows |lam| <= 2 N at one row), nor a responder's rows beyond r_Q; see
docs/threat_model.md.
The parties see only ciphertexts and uniformly masked plaintexts (:mod:`vfl.secure.products`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.privacy.accounting import PrivacyReport, epsilon_against, noisy_gd_epsilon_exact
from vfl.privacy.gradient_release import GradientRelease, operand_bound, project_ball
from vfl.protocols.contracts import Incoming, Out, kind_of
from vfl.protocols.fm_release import NOISE_TAIL_STDS
from vfl.secure.discrete_noise import discrete_gaussian_array
from vfl.secure.encoding import DEFAULT_PRECISION_BITS, decode_products
from vfl.secure.keys import public_key_from_bytes, public_key_to_bytes
from vfl.secure.packing import default_noise_bits
from vfl.secure.products import (
    EncryptedBlock,
    ProductEncryptor,
    ProductResponder,
    add_packed,
    combine_packed_shares,
)

__all__ = ["GDParams", "GDParty", "GDCoordinator", "GD_ROUND", "GD_REQUEST", "GD_RESPONSE", "GD_SHARE",
           "operand_bound", "gradient_scale", "iterate_digest", "RequestShape"]

#: message kinds of the phase (wire values; :mod:`vfl.net.messages` carries them)
GD_ROUND, GD_REQUEST, GD_RESPONSE, GD_SHARE = "gd_round", "gd_request", "gd_response", "gd_share"
#: relative slack on the public ball (the coordinator's projection rounds)
BALL_SLACK = 1e-9
#: the coarsest fixed-point grid 2^-p a party accepts. X_k and v_l / b are rounded to the grid before any noise, so
#: each row's term moves by up to about sqrt(d) 2^-(p+1) of its bound: the released statistic's sensitivity is
#: Delta (1 + O(sqrt(d) 2^-p)) while sigma is calibrated to Delta. At p >= 24 that is below 1e-5 relative for
#: d <= 10^5; a hostile plan with p = 1 would double a row's norm (0.25 -> 0.5 per entry) and is refused.
MIN_PRECISION_BITS = DEFAULT_PRECISION_BITS


def gradient_scale(model: str, n_samples: int) -> float:
    """c in g_k = c sum_l X_k^T v_l (module docstring): 2/N linear, 1/N logistic."""
    return (2.0 if model == "linear" else 1.0) / n_samples


@dataclass(frozen=True, kw_only=True)
class GDParams:
    """The public parameters of a networked noisy-gradient run (the PLAN's ``params``)."""

    release: GradientRelease
    party_radii: tuple[float, float]    # r_A, r_B: public row-norm bounds of the two blocks, r_A^2 + r_B^2 <= 1
    widths: tuple[int, int]              # d_A, d_B
    precision_bits: int = DEFAULT_PRECISION_BITS
    key_bits: int = 2048

    def __post_init__(self) -> None:
        if isinstance(self.precision_bits, bool) or not MIN_PRECISION_BITS <= self.precision_bits <= 52:
            raise ConfigurationError(f"precision_bits={self.precision_bits!r}: noisy-gd needs a fixed-point grid of "
                                     f"{MIN_PRECISION_BITS} to 52 bits (a coarser grid inflates the sensitivity "
                                     "the noise is calibrated to)")
        if sum(r * r for r in self.party_radii) > 1.0 + 1e-12:
            raise ConfigurationError("the party radii must satisfy r_A^2 + r_B^2 <= 1 (the l2 domain)")
        rr = self.release.party_radii
        if rr is None or any(abs(float(a) - float(b)) > 1e-12 for a, b in zip(rr, self.party_radii, strict=True)):
            raise ConfigurationError("a networked noisy-gd release must be calibrated against a hostile co-party: "
                                     "GradientRelease(party_radii=...) equal to the plan's party radii")
        if sum(self.widths) != self.release.n_features:
            raise ConfigurationError("the block widths must add up to the release's feature count")

    def slice(self, party: int) -> slice:
        lo = 0 if party == 0 else self.widths[0]
        return slice(lo, lo + self.widths[party])

    def bound(self, party: int) -> float:
        """The common public scale b = max_l b_l of both operands (``party`` is kept for the call sites): one
        scale keeps the responder's folded own term X_k^T v_k / b inside the product's slots (|.| <= N)."""
        r = self.release
        return max(operand_bound(r.model, float(r.radius), self.party_radii[q], label_owner=q == 1) for q in (0, 1))


@dataclass(frozen=True)
class RequestShape:
    """What combining a round's two shares needs of a GD_REQUEST (not its ciphertexts): the slot layout, the number
    of column groups and the encryptor's Paillier modulus n. The coordinator keeps it per round; each party records
    it for its own and the co-party's request (:attr:`GDParty.shapes`) to replay the rounds in its model check."""

    layout: Any
    n_groups: int
    modulus: int

    @classmethod
    def of(cls, request: Any) -> RequestShape:
        """Of an :class:`EncryptedBlock` (or a :class:`ProductEncryptor`'s request)."""
        return cls(request.layout, int(request.n_groups), int(request.public_key.n))


def check_iterate(body: dict, params: GDParams, expected_round: int) -> tuple[int, np.ndarray]:
    """The hostile-coordinator check of a GD_ROUND: the next planned round and a finite w in the public ball."""
    rel = params.release
    t = body.get("t")
    if isinstance(t, bool) or not isinstance(t, int) or t != expected_round or t >= rel.steps:
        raise ProtocolError(f"refused round {t!r}: the plan has {rel.steps} rounds and the next is {expected_round}")
    try:
        w = np.asarray(body.get("w"), dtype=np.float64)
    except (TypeError, ValueError):
        raise ProtocolError("refused round: w is not a vector of numbers") from None
    if w.shape != (rel.n_features,) or not np.all(np.isfinite(w)):
        raise ProtocolError(f"refused round: w must be {rel.n_features} finite numbers")
    if float(np.linalg.norm(w)) > float(rel.radius) * (1.0 + BALL_SLACK):
        raise ProtocolError(f"refused round: ||w|| = {np.linalg.norm(w):.6g} lies outside the public ball "
                            f"R = {rel.radius}")
    return t, w


def check_request_layout(request: EncryptedBlock, params: GDParams, sender: str) -> None:
    """A GD_REQUEST must use the plan's slot layout: N rows, precision p, value bound 1 (|v_l / b| <= 1, the operand
    bound the sensitivity rests on) and the default noise bits. A party that widened its value bound could encrypt an
    amplified operand (lam e_i) that its own encoder, the responder and the slot check would all let through."""
    lay, p = request.layout, params.precision_bits
    if (lay.n_rows, lay.precision_bits, float(lay.value_bound), lay.noise_bits) != (
            params.release.n_samples, p, 1.0, default_noise_bits(p)):
        raise ProtocolError(f"refused request from {sender}: its slot layout (rows {lay.n_rows}, precision "
                            f"{lay.precision_bits}, value bound {lay.value_bound:g}, noise bits {lay.noise_bits}) is "
                            f"not the plan's ({params.release.n_samples}, {p}, 1, {default_noise_bits(p)})")


def product_magnitude_limit(params: GDParams, encryptor: int) -> int:
    """The largest |entry| of an honest combined product of a round, in raw units 2^-2p: the cross term
    |v_l^T X_k| / b and the responder's own term |X_k^T v_k| / b are each <= N A B (A = 2^p: |v / b| <= 1; B =
    ceil(r_k 2^p) + 1: |x_ik| <= r_k), plus NOISE_TAIL_STDS std of the two noise draws (as the FM release's
    :func:`~vfl.protocols.fm_release.check_product_magnitude`). An operand amplified inside its slots (lam e_i,
    crafted ciphertexts with the plan's layout) then passes only for |lam| <= 2 N."""
    p, rel, k = params.precision_bits, params.release, 1 - encryptor
    a, b = 1 << p, math.ceil(params.party_radii[k] * 2.0**p) + 1
    std = rel.sigma / (gradient_scale(rel.model, rel.n_samples) * params.bound(encryptor)) * 2.0 ** (2 * p)
    return 2 * rel.n_samples * a * b + math.ceil(NOISE_TAIL_STDS * math.sqrt(2.0) * std)


def check_product_magnitude(total: np.ndarray, params: GDParams, encryptor: int) -> None:
    """Refuse a round whose combined product exceeds :func:`product_magnitude_limit` (an amplified operand)."""
    limit = product_magnitude_limit(params, encryptor)
    if any(abs(int(u)) > limit for u in np.asarray(total, dtype=object).flat):
        raise ProtocolError(f"refused round: the combined product of party {encryptor}'s request exceeds what "
                            "operands inside the public bounds can produce (an amplified operand or a corrupted "
                            "share); the run stops")


def iterate_digest(w: np.ndarray) -> str:
    """SHA-256 of the iterate as float64 bytes: both parties must compute the round at the same w_t (a coordinator
    that sent A the iterate (a, 0) and B (0, b), both in the ball, would have them compute at (a, b), outside it)."""
    return hashlib.sha256(np.ascontiguousarray(w, dtype="<f8").tobytes()).hexdigest()


class GDParty:
    """One party's side: its block X_k (and y at the label owner B), its Paillier key, its noise generator.

    ``noise_log`` keeps this party's noise draws per round in gradient units (a d-vector: the draw it folded into
    its responder share on its own block, the draw added as encryptor on the other block): tests compare the
    networked model with the in-process one under the same total noise. ``workers``: local processes for the
    big-number work (:mod:`vfl.secure.executors`; 1 = this thread, as the cost benchmark measures it).
    """

    def __init__(self, party: int, X: np.ndarray, y: np.ndarray | None, params: GDParams, *,
                 keypair: tuple, rng: np.random.Generator, workers: int | None = None) -> None:
        if party not in (0, 1) or (party == 1) != (y is not None):
            raise ConfigurationError("party 0 holds X_A; party 1 (the label owner) holds X_B and y")
        self.party, self.params, self.rng, self.workers = party, params, rng, workers
        self.X = np.asarray(X, dtype=np.float64)
        if self.X.shape[1] != params.widths[party]:
            raise ConfigurationError(f"party {party} holds {self.X.shape[1]} columns, the plan says "
                                     f"{params.widths[party]}")
        if np.max(np.linalg.norm(self.X, axis=1), initial=0.0) > params.party_radii[party] * (1 + 1e-12):
            raise ConfigurationError(f"party {party}'s rows exceed its public radius {params.party_radii[party]}")
        self.y = None if y is None else np.asarray(y, dtype=np.float64)
        if self.y is not None:   # the label domain the sensitivity assumes: |y| <= 1 linear, y in {0, 1} logistic
            ok = (np.all(np.abs(self.y) <= 1.0) if params.release.model == "linear"
                  else np.all((self.y == 0.0) | (self.y == 1.0)))
            if self.y.shape != (self.X.shape[0],) or not ok:
                raise ConfigurationError("the labels must be one per row, in [-1, 1] (linear) or {0, 1} (logistic)")
        self.public_key, self._private_key = keypair
        self.next_round = 0
        self._v: np.ndarray | None = None
        self._encryptor: ProductEncryptor | None = None
        self._t = -1
        self._w_digest = ""
        self.noise_log: list[np.ndarray] = []
        #: this party's view of the rounds, for its model check (vfl.net.round_check): the iterate w_t of each
        #: GD_ROUND it answered and the shapes of round t's two requests (index = the rounds' party 0/1)
        self.iterates: list[np.ndarray] = []
        self.shapes: list[dict[int, RequestShape]] = []

    @property
    def other(self) -> int:
        return 1 - self.party

    def _operand(self, w: np.ndarray) -> np.ndarray:
        rel = self.params.release
        s = 1.0 if rel.model == "linear" else 0.25
        v = s * (self.X @ w[self.params.slice(self.party)])
        if self.y is not None:
            v = v - self.y if rel.model == "linear" else v + 0.5 - self.y
        return v

    def _noise_raw(self, width: int, operand_bound_other: float) -> tuple[np.ndarray, np.ndarray]:
        """One draw N(0, sigma^2) per coordinate in gradient units, as integers of the product (units 2^-2p of
        v_l^T X_k / b_l): gradient = c b_l product. Returns (integers, the draw in gradient units)."""
        p, rel = self.params.precision_bits, self.params.release
        unit = gradient_scale(rel.model, rel.n_samples) * operand_bound_other
        raw = discrete_gaussian_array(rel.sigma / unit, (1, width), self.rng, scale_bits=2 * p)
        return raw, decode_products(raw, p).reshape(-1) * unit

    def handle(self, msg: Incoming) -> list[Out]:
        kind = kind_of(msg)
        if kind == GD_ROUND:
            return self.start_round(msg.body)
        if kind == GD_REQUEST:
            return self.respond(msg)
        if kind == GD_RESPONSE:
            return self.decrypt(msg)
        raise ProtocolError(f"unexpected {kind} in the noisy-gradient phase")

    def start_round(self, body: dict) -> list[Out]:
        """GD_ROUND: check it (hostile coordinator) before touching the data, then Enc(v_l / b_l)."""
        t, w = check_iterate(body, self.params, self.next_round)
        self.next_round, self._t = t + 1, t
        self._w_digest = iterate_digest(w)
        self.iterates.append(w.copy())
        self.shapes.append({})
        self._v = self._operand(w)
        self.noise_log.append(np.zeros(self.params.release.n_features))
        enc = ProductEncryptor(self._private_key, (self._v / self.params.bound(self.party)).reshape(-1, 1),
                               response_cols=self.params.widths[self.other],
                               precision_bits=self.params.precision_bits, workers=self.workers)
        self._encryptor = enc
        request = enc.request()
        self.shapes[-1][self.party] = RequestShape.of(request)
        header, frames = request.to_wire()
        return [Out(type=GD_REQUEST, body={"t": t, "w_digest": self._w_digest, "wire": header},
                    payload=[public_key_to_bytes(self.public_key), *frames])]

    def respond(self, msg: Incoming) -> list[Out]:
        """GD_REQUEST from the other party: v_l^T X_k + (X_k^T v_k)/b_l + noise, masked; k's packed share."""
        if self._v is None or msg.body.get("t") != self._t:
            raise ProtocolError("request for a round this party has not started")
        if msg.body.get("w_digest") != self._w_digest:   # a coordinator that sent the parties different iterates
            raise ProtocolError("refused request: the other party was sent another iterate w_t than this party")
        p, b_other = self.params.precision_bits, self.params.bound(self.other)
        key = public_key_from_bytes(msg.blob(0), min_bits=self.params.key_bits)
        request = EncryptedBlock.from_wire(msg.body["wire"], [msg.blob(1)], key)
        if request.n_cols != 1:
            raise ProtocolError("a noisy-gradient request carries one column")
        check_request_layout(request, self.params, f"party {self.other}")
        self.shapes[-1][self.other] = RequestShape.of(request)
        raw_noise, noise = self._noise_raw(self.params.widths[self.party], b_other)
        self.noise_log[-1][self.params.slice(self.party)] += noise
        own = self.X.T @ self._v / b_other * 2.0 ** (2 * p)
        own_raw = np.array([[int(round(float(u))) for u in own]], dtype=object)
        responder = ProductResponder(self.X, precision_bits=p, workers=self.workers)
        response, share = responder.respond(request, raw_noise)
        share = add_packed(share, own_raw, layout=request.layout, modulus=int(key.n))
        self._v = None
        header, frames = response.to_wire()
        return [Out(type=GD_RESPONSE, body={"t": self._t, "wire": header}, payload=frames),
                Out(type=GD_SHARE, body={"t": self._t, "role": "responder"},
                    payload=[np.asarray(share, dtype=object)])]

    def decrypt(self, msg: Incoming) -> list[Out]:
        """GD_RESPONSE to this party's request: its share plus its own noise draw on the other block."""
        enc = self._encryptor
        if enc is None or msg.body.get("t") != self._t:
            raise ProtocolError("response for a request this party did not make")
        self._encryptor = None
        raw_noise, noise = self._noise_raw(self.params.widths[self.other], self.params.bound(self.party))
        self.noise_log[-1][self.params.slice(self.other)] += noise
        share = enc.decrypt(enc.response_from_wire(msg.body["wire"], [msg.blob(0)]), noise=raw_noise)
        return [Out(type=GD_SHARE, body={"t": self._t, "role": "encryptor"},
                    payload=[np.asarray(share, dtype=object)])]


@dataclass
class GDCoordinator:
    """The coordinator's side: rounds, relays, combination of the shares, projection and averaging."""

    params: GDParams
    log: Callable[[str], None] = lambda _m: None
    w: np.ndarray = field(init=False)
    t: int = field(init=False, default=0)
    total: np.ndarray = field(init=False)
    _requests: dict[int, RequestShape] = field(init=False, default_factory=dict)
    _shares: dict[int, dict[str, np.ndarray]] = field(init=False, default_factory=dict)
    gradients: list[np.ndarray] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        n = self.params.release.n_features
        self.w, self.total = np.zeros(n), np.zeros(n)

    def done(self) -> bool:
        return self.t >= self.params.release.steps

    def round_messages(self) -> list[Out]:
        body = {"t": self.t, "w": [float(v) for v in self.w]}
        return [Out(type=GD_ROUND, body=body, to=i) for i in (0, 1)]

    def expect(self, encryptor: int, shape: RequestShape) -> None:
        """Round ``t``'s request of ``encryptor`` (its shape): the shares that follow combine under it. A party's
        model check replays the rounds from the signed shares with the shapes it recorded (no ciphertexts)."""
        if encryptor in self._requests:
            raise ProtocolError(f"party {encryptor} sent a second request in round {self.t}")
        self._requests[encryptor] = shape

    @property
    def requests_open(self) -> bool:
        """A request of the current round was seen (its shares may follow)."""
        return bool(self._requests)

    def handle(self, i: int, msg: Incoming) -> list[Out]:
        kind, t = kind_of(msg), msg.body.get("t")
        if t != self.t or self.done():
            raise ProtocolError(f"party {i} sent {kind} for round {t!r}; the current round is {self.t}")
        if kind == GD_REQUEST:
            key = public_key_from_bytes(msg.blob(0), min_bits=self.params.key_bits)
            request = EncryptedBlock.from_wire(msg.body["wire"], [msg.blob(1)], key)
            if request.n_cols != 1:
                raise ProtocolError(f"party {i}'s noisy-gradient request carries {request.n_cols} columns, not one")
            check_request_layout(request, self.params, f"party {i}")
            self.expect(i, RequestShape.of(request))
            return [Out(type=GD_REQUEST, body=dict(msg.body), payload=list(msg.payload), to=1 - i)]
        if kind == GD_RESPONSE:   # from the responder i, to the encryptor 1 - i
            return [Out(type=GD_RESPONSE, body=dict(msg.body), payload=list(msg.payload), to=1 - i)]
        if kind == GD_SHARE:
            role = msg.body.get("role")
            encryptor = i if role == "encryptor" else 1 - i
            got = self._shares.setdefault(encryptor, {})
            if role not in ("encryptor", "responder") or role in got or encryptor not in self._requests:
                raise ProtocolError(f"unexpected share from party {i} in round {t}")
            share = np.asarray(msg.ints(), dtype=object)
            req, modulus = self._requests[encryptor], self._requests[encryptor].modulus
            if share.shape != (self.params.widths[1 - encryptor], req.n_groups) or not all(
                    isinstance(v, int) and 0 <= v < modulus for v in share.flat):
                raise ProtocolError(f"share from party {i} in round {t} is not a packed share of the agreed shape")
            got[role] = share
            return self._maybe_step()
        raise ProtocolError(f"unexpected {kind} from party {i} in the noisy-gradient phase")

    def _maybe_step(self) -> list[Out]:
        if len(self._shares) < 2 or any(len(s) < 2 for s in self._shares.values()):
            return []
        rel, p = self.params.release, self.params.precision_bits
        g = np.zeros(rel.n_features)
        for enc, shares in self._shares.items():
            req = self._requests[enc]
            total = combine_packed_shares(shares["encryptor"], shares["responder"], layout=req.layout, n_cols=1,
                                          modulus=req.modulus, encryptor=f"party {enc}",
                                          responder=f"party {1 - enc}")
            check_product_magnitude(total, self.params, enc)
            unit = gradient_scale(rel.model, rel.n_samples) * self.params.bound(enc)
            g[self.params.slice(1 - enc)] = unit * decode_products(total, p).reshape(-1)
        self.gradients.append(g)
        self.w = project_ball(self.w - rel.eta * g, float(rel.radius))
        self.total += self.w
        self.t += 1
        self._requests.clear()
        self._shares.clear()
        self.log(f"  noisy-gd round {self.t}/{rel.steps}")
        return [] if self.done() else self.round_messages()

    def finish(self) -> tuple[np.ndarray, PrivacyReport]:
        """The model (mean of w_1..w_T) and the report, with epsilon against the coordinator (noise 2 sigma^2)."""
        if not self.done():
            raise ProtocolError("the noisy-gradient phase has not run all its rounds")
        rel = self.params.release
        report = rel.privacy_report()
        worst = max(rel.sensitivity, *(rel.party_sensitivities or ()))   # a hostile party's operand, too
        eps_coord = noisy_gd_epsilon_exact(int(rel.steps), worst, math.sqrt(2.0) * rel.sigma, rel.delta)
        report.noise_sharing = "two-sided"
        report.epsilon_against = epsilon_against("two-sided", calibrated=report.epsilon, coordinator=eps_coord,
                                                 party_sees_noise_free=False)
        report.notes.append("networked: two parties, each adds a full per-round draw sigma on every gradient "
                            "coordinate (two-sided noise); the coordinator sees 2 sigma^2; sigma is calibrated to "
                            "the larger per-party sensitivity against a co-party that encrypts any operand inside "
                            "the plan's layout")
        report.extra["parties"] = 2
        return self.total / rel.steps, report


def run_local(X_blocks: tuple[np.ndarray, np.ndarray], y: np.ndarray, params: GDParams, *, keypairs: tuple,
              rngs: tuple[np.random.Generator, np.random.Generator], wire: Callable[[Out], Incoming] | None = None
              ) -> tuple[np.ndarray, PrivacyReport, GDCoordinator, tuple[GDParty, GDParty]]:
    """Both parties and the coordinator in one process (tests, benchmarks). Every message goes through ``wire``
    (default :meth:`_Msg.of`; tests and the benchmark pass :mod:`vfl.net.messages`' encode/decode, so each message
    is validated, and can be counted, exactly as on the transport)."""
    wire = _Msg.of if wire is None else wire
    parties = (GDParty(0, X_blocks[0], None, params, keypair=keypairs[0], rng=rngs[0]),
               GDParty(1, X_blocks[1], y, params, keypair=keypairs[1], rng=rngs[1]))
    coord = GDCoordinator(params)
    queue: list[Out] = coord.round_messages()
    while queue:
        out = queue.pop(0)
        if out.to is not None:   # coordinator -> party out.to; the party's answers go to the coordinator
            answers = parties[out.to].handle(wire(out))
            for a in answers:
                queue.extend(coord.handle(out.to, wire(a)))
    w, report = coord.finish()
    return w, report, coord, parties


@dataclass
class _Msg:
    """An :class:`~vfl.protocols.contracts.Incoming` made from an :class:`Out` (in-process driver)."""

    type: Any
    body: dict
    payload: list

    @classmethod
    def of(cls, out: Out) -> _Msg:
        return cls(out.type, dict(out.body), list(out.payload))

    def array(self, i: int = 0) -> np.ndarray:
        return np.asarray(self.payload[i], dtype=np.float64)

    def ints(self, i: int = 0) -> np.ndarray:
        return np.asarray(self.payload[i], dtype=object)

    def blob(self, i: int = 0) -> bytes:
        return bytes(self.payload[i])
