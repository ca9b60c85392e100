"""Packed, masked Paillier cross-party products ``A^T B`` as pure message-in/message-out roles.

Protocol (one round trip; ``A`` is ``n x d_a`` at the key holder, ``B`` is ``n x d_b`` at the responder;
offset fixed-point encoding of :mod:`vfl.secure.encoding`, slot layout of :mod:`vfl.secure.packing`):

1. Key holder (:class:`ProductEncryptor`) encodes ``a'_ij = round(a_ij 2^p) + O`` and sends
   ``c_ig = Enc(sum_{j in g} a'_ij 2^(w slot(j)))`` for every row ``i`` and column group ``g``
   (:class:`EncryptedBlock`: ``n * ceil(d_a / s)`` ciphertexts instead of ``n d_a``).
2. Responder (:class:`ProductResponder`) computes per column ``k`` and group ``g`` the
   multi-exponentiation ``prod_i c_ig^{b'_ik} = Enc(sum_j 2^(w j) sum_i a'_ij b'_ik)``, multiplies in
   ``g^M`` with ``M = sum_j 2^(w j) (noise_jk + N + r_jk)`` (``r_jk`` uniform on ``[0, 2^(v+kappa))``
   from :mod:`secrets`, ``noise`` its DP noise in units ``2^-2p``) and a fresh ``Enc(0) = r^n`` with
   ``r`` uniform in ``Z*_n`` (re-randomisation: phe never does this; always full-size, never short-exponent,
   since the key holder can extract the randomness), and keeps the share
   ``s^B_jk = -(N + r_jk) - O sum_i b_int_ik - n O^2`` (:class:`MaskedResponse`).
3. Key holder decrypts, unpacks and keeps ``s^A_jk = D_jk - O sum_i a_int_ij``.

Then ``s^A + s^B = sum_i a_int_ij b_int_ik + noise_jk`` exactly (:func:`combine_shares` scales by
``2^-2p``). What each side sees: the responder only ciphertexts under a key it does not hold; the key
holder only ``D_jk = y_jk + r_jk`` with ``y_jk in [0, 2^v)``, statistically ``2^-kappa``-close to uniform
(``kappa >= 40``), i.e. never a noise-free (or even a noisy) statistic, only its additive share.
The decryption audit hook ``on_decrypt`` sees every plaintext the key holder decrypts.
Honest-but-curious, non-colluding parties (spec Sec. 1.3); the responder answers each session once.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from phe import paillier
from tqdm.auto import tqdm

from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    EncodingOverflowError,
    KeyValidationError,
    ProtocolError,
)
from vfl.rng import RandomState, make_rng
from vfl.secure.discrete_noise import discrete_gaussian_array
from vfl.secure.encoding import DEFAULT_PRECISION_BITS, decode_products, encode_offset
from vfl.secure.fastmath import (
    RANDOMNESS_MODES,
    RandomnessPool,
    cached_encrypter,
    encrypt_many,
    mpz,
    multiexp_columns,
    multiexp_cost,
    resolve_workers,
    warn_if_slow_backend,
)
from vfl.secure.keys import (
    ciphertext_byte_length,
    ciphertexts_from_bytes,
    ciphertexts_to_bytes,
    generate_keypair,
    key_fingerprint,
)
from vfl.secure.packing import MIN_MASK_BITS, SlotLayout, default_noise_bits, pack, unpack

WIRE_VERSION = 1
RERANDOMISATION = "standard"
"""Randomness of the responder's fresh ``Enc(0)``: always full-size, whatever the encryption mode (see respond)."""
MAX_ROWS = 10_000_000
MAX_COLS = 100_000
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _int_field(header: dict[str, Any], name: str, lo: int, hi: int) -> int:
    value = header.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ProtocolError(f"header field {name!r} must be an int in [{lo}, {hi}], got {value!r}")
    return value


def _str_field(header: dict[str, Any], name: str, pattern: re.Pattern[str]) -> str:
    value = header.get(name)
    if not isinstance(value, str) or not pattern.match(value):
        raise ProtocolError(f"header field {name!r} is malformed")
    return value


def _check_envelope(header: Any, frames: Any, kind: str, public_key: paillier.PaillierPublicKey) -> None:
    if not isinstance(header, dict):
        raise ProtocolError("header must be a dict")
    if header.get("kind") != kind or header.get("version") != WIRE_VERSION:
        raise ProtocolError(f"expected a {kind} v{WIRE_VERSION} message, got {header.get('kind')!r}")
    if not isinstance(frames, (list, tuple)) or len(frames) != 1:
        raise ProtocolError("expected exactly one ciphertext frame")
    if _str_field(header, "key_fingerprint", _HEX64) != key_fingerprint(public_key):
        raise KeyValidationError("message was encrypted under a different public key")
    if _int_field(header, "ciphertext_bytes", 1, 1 << 16) != ciphertext_byte_length(public_key):
        raise ProtocolError("ciphertext width does not match the public key")


@dataclass
class EncryptedBlock:
    """Key holder -> responder: ``Enc(pack(a'_i))`` for every row ``i`` and column group.

    ``ciphertexts[i * n_groups + g]`` encrypts row ``i``'s columns ``layout.group_columns(n_cols, g)``.
    """

    session: str
    public_key: paillier.PaillierPublicKey
    layout: SlotLayout
    n_cols: int
    ciphertexts: list[int] = field(repr=False)

    KIND = "vfl.secure.encrypted_block"

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups(self.n_cols)

    def to_wire(self) -> tuple[dict[str, Any], list[bytes]]:
        lay = self.layout
        header = {
            "kind": self.KIND, "version": WIRE_VERSION, "session": self.session,
            "key_fingerprint": key_fingerprint(self.public_key),
            "ciphertext_bytes": ciphertext_byte_length(self.public_key),
            "n_rows": lay.n_rows, "n_cols": self.n_cols, "precision_bits": lay.precision_bits,
            "value_bound": float(lay.value_bound), "noise_bits": lay.noise_bits, "mask_bits": lay.mask_bits,
            "slot_bits": lay.slot_bits, "slots_per_ciphertext": lay.slots_per_ciphertext,
            "n_groups": self.n_groups,
        }
        return header, [ciphertexts_to_bytes(self.public_key, self.ciphertexts)]

    @classmethod
    def from_wire(cls, header: dict[str, Any], frames: list[bytes],
                  public_key: paillier.PaillierPublicKey) -> EncryptedBlock:
        _check_envelope(header, frames, cls.KIND, public_key)
        value_bound = header.get("value_bound")
        if not isinstance(value_bound, float) or not math.isfinite(value_bound) or value_bound <= 0:
            raise ProtocolError("header field 'value_bound' must be a positive finite float")
        try:
            layout = SlotLayout(
                key_bits=int(public_key.n).bit_length(), n_rows=_int_field(header, "n_rows", 1, MAX_ROWS),
                precision_bits=_int_field(header, "precision_bits", 1, 52), value_bound=value_bound,
                noise_bits=_int_field(header, "noise_bits", 1, 4096),
                mask_bits=_int_field(header, "mask_bits", 40, 1024),
            )
        except (ConfigurationError, EncodingOverflowError) as exc:
            raise ProtocolError(f"request layout is invalid: {exc}") from None
        n_cols = _int_field(header, "n_cols", 1, MAX_COLS)
        if (header.get("slot_bits"), header.get("slots_per_ciphertext"), header.get("n_groups")) != (
            layout.slot_bits, layout.slots_per_ciphertext, layout.n_groups(n_cols)
        ):
            raise ProtocolError("request slot layout disagrees with its own parameters")
        count = layout.n_rows * layout.n_groups(n_cols)
        cts = ciphertexts_from_bytes(public_key, frames[0], count)
        return cls(_str_field(header, "session", _HEX32), public_key, layout, n_cols, cts)


@dataclass
class MaskedResponse:
    """Responder -> key holder: one re-randomised ciphertext per (responder column ``k``, group ``g``).

    ``ciphertexts[k * n_groups + g]`` decrypts to the packed masked slots
    ``sum_i a'_ij b'_ik + noise_jk + N + r_jk`` for ``j`` in group ``g``.
    """

    session: str
    public_key: paillier.PaillierPublicKey
    slot_bits: int
    n_enc_cols: int
    n_resp_cols: int
    n_groups: int
    ciphertexts: list[int] = field(repr=False)

    KIND = "vfl.secure.masked_response"

    def to_wire(self) -> tuple[dict[str, Any], list[bytes]]:
        header = {
            "kind": self.KIND, "version": WIRE_VERSION, "session": self.session,
            "key_fingerprint": key_fingerprint(self.public_key),
            "ciphertext_bytes": ciphertext_byte_length(self.public_key), "slot_bits": self.slot_bits,
            "n_enc_cols": self.n_enc_cols, "n_resp_cols": self.n_resp_cols, "n_groups": self.n_groups,
        }
        return header, [ciphertexts_to_bytes(self.public_key, self.ciphertexts)]

    @classmethod
    def from_wire(cls, header: dict[str, Any], frames: list[bytes],
                  public_key: paillier.PaillierPublicKey) -> MaskedResponse:
        _check_envelope(header, frames, cls.KIND, public_key)
        key_bits = int(public_key.n).bit_length()
        n_resp = _int_field(header, "n_resp_cols", 1, MAX_COLS)
        n_groups = _int_field(header, "n_groups", 1, MAX_COLS)
        cts = ciphertexts_from_bytes(public_key, frames[0], n_resp * n_groups)
        return cls(_str_field(header, "session", _HEX32), public_key, _int_field(header, "slot_bits", 42, key_bits),
                   _int_field(header, "n_enc_cols", 1, MAX_COLS), n_resp, n_groups, cts)


# ----------------------------------------------------------------------------- roles
def _as_matrix(X: Any, name: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise DataValidationError(f"{name} must be a non-empty 2-D array, got shape {X.shape}")
    return X


def _progress_bar(enabled: bool, total: int, desc: str) -> tqdm:
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)


class ProductEncryptor:
    """Key-holder role: encrypts packed rows of ``A`` and decrypts the masked response into its share.

    ``on_decrypt(plaintext: int)`` is called with every plaintext this object ever decrypts (audit
    hook). ``randomness``: ``"short-exponent"`` (default) or ``"standard"``; see
    :mod:`vfl.secure.fastmath`. ``noise_bits`` (default ``2p + 32``) bounds the responder's noise.
    """

    def __init__(self, private_key: paillier.PaillierPrivateKey, A: np.ndarray, *, precision_bits: int,
                 value_bound: float = 1.0, noise_bits: int | None = None, mask_bits: int = MIN_MASK_BITS,
                 randomness: str = "short-exponent", workers: int | None = None, progress: bool = False,
                 on_decrypt: Callable[[int], None] | None = None) -> None:
        warn_if_slow_backend()
        self._private_key = private_key
        self.public_key: paillier.PaillierPublicKey = private_key.public_key
        A = _as_matrix(A, "A")
        self.n_rows, self.n_cols = A.shape
        self.layout = SlotLayout(
            key_bits=int(self.public_key.n).bit_length(), n_rows=self.n_rows, precision_bits=precision_bits,
            value_bound=float(value_bound),
            noise_bits=default_noise_bits(precision_bits) if noise_bits is None else noise_bits,
            mask_bits=mask_bits,
        )
        self._encoded, self._col_sums = encode_offset(A, precision_bits, float(value_bound))
        # one encrypter per key in this process: h_s, its table and any precomputed pool are reused
        self._encrypter = cached_encrypter(self.public_key.n, p=private_key.p, q=private_key.q,
                                           randomness=randomness)
        self.session = secrets.token_hex(16)
        self.workers = workers
        self.progress = progress
        self.on_decrypt = on_decrypt
        self._requested = False
        self._decrypted = False
        self.stats: dict[str, int] = {}

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups(self.n_cols)

    def precompute_randomness(self, count: int | None = None, workers: int | None = None) -> None:
        """Offline phase: precompute the encryption randomness for ``count`` (default: one request)."""
        count = self.n_rows * self.n_groups if count is None else count
        RandomnessPool.fill(self._encrypter, count, resolve_workers(workers, count * 3.0))

    def _plaintexts(self) -> list[int]:
        w = self.layout.slot_bits
        groups = [self.layout.group_columns(self.n_cols, g) for g in range(self.n_groups)]
        return [pack([self._encoded[i, j] for j in cols], w) for i in range(self.n_rows) for cols in groups]

    def request(self) -> EncryptedBlock:
        """Encrypt the packed rows (step 1). One request per encryptor (sessions are single-use)."""
        if self._requested:
            raise ProtocolError("this encryptor already produced its request; create a new one per product")
        plaintexts = self._plaintexts()
        per_item_ms = 0.25 if self._encrypter.randomness == "short-exponent" else 3.2
        workers = resolve_workers(self.workers, len(plaintexts) * per_item_ms)
        with _progress_bar(self.progress, len(plaintexts), "encrypting rows") as bar:
            cts = encrypt_many(self._encrypter, plaintexts, workers, bar.update)
        self._requested = True
        self.stats["encryptions"] = len(cts)
        self.stats["workers"] = workers
        return EncryptedBlock(self.session, self.public_key, self.layout, self.n_cols, cts)

    def decrypt(self, response: MaskedResponse) -> np.ndarray:
        """Decrypt the masked response (step 3): the key holder's share, ``d_a x d_b`` object ints."""
        if not self._requested or self._decrypted:
            raise ProtocolError("decrypt() needs exactly one prior request() and may run once")
        if response.session != self.session:
            raise ProtocolError("response belongs to another session")
        if key_fingerprint(response.public_key) != key_fingerprint(self.public_key):
            raise KeyValidationError("response was encrypted under a different public key")
        if (response.slot_bits, response.n_enc_cols, response.n_groups) != (
            self.layout.slot_bits, self.n_cols, self.n_groups
        ):
            raise ProtocolError("response layout does not match the request")
        self._decrypted = True
        self.stats["decryptions"] = len(response.ciphertexts)
        d_b, G, O = response.n_resp_cols, self.n_groups, self.layout.offset
        share = np.empty((self.n_cols, d_b), dtype=object)
        for k in range(d_b):
            for g in range(G):
                plaintext = self._private_key.raw_decrypt(int(response.ciphertexts[k * G + g]))
                if self.on_decrypt is not None:
                    self.on_decrypt(plaintext)
                cols = self.layout.group_columns(self.n_cols, g)
                for j, slot in zip(cols, unpack(plaintext, self.layout.slot_bits, len(cols)), strict=True):
                    share[j, k] = slot - O * self._col_sums[j]
        return share


def _check_noise(noise: Any, shape: tuple[int, int], bound: int) -> np.ndarray:
    if noise is None:
        return np.zeros(shape, dtype=object)
    arr = np.asarray(noise)
    if arr.shape != shape:
        raise DataValidationError(f"noise must have shape {shape}, got {arr.shape}")
    if arr.dtype != object and not np.issubdtype(arr.dtype, np.integer):
        raise DataValidationError("noise must be an integer array in fixed-point units 2**-(2*precision_bits)")
    out = np.empty(shape, dtype=object)
    for idx, v in np.ndenumerate(arr):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise DataValidationError("noise entries must be integers")
        if abs(int(v)) >= bound:  # the message never quotes the (secret) noise value
            raise EncodingOverflowError(
                f"a noise entry exceeds the agreed bound 2**noise_bits = 2**{bound.bit_length() - 1}"
            )
        out[idx] = int(v)
    return out


class ProductResponder:
    """Responder role: multiplies its column exponents into the encrypted rows, adds mask and noise.

    ``precision_bits``, ``value_bound`` and ``noise_bits`` (default ``2p + 32``, as at the key holder) are the
    agreed public parameters; a request that differs is refused. ``randomness`` is validated for symmetry
    with the key holder but does not weaken the re-randomisation: the fresh ``Enc(0)`` multiplied into every
    response always uses a uniform ``r^n`` (:data:`RERANDOMISATION`), because its job is to hide the
    product's randomness from the key holder, who holds the factorisation.
    """

    def __init__(self, B: np.ndarray, *, precision_bits: int, value_bound: float = 1.0,
                 noise_bits: int | None = None, randomness: str = "short-exponent", workers: int | None = None,
                 progress: bool = False) -> None:
        warn_if_slow_backend()
        if randomness not in RANDOMNESS_MODES:
            raise ConfigurationError(f"randomness must be one of {RANDOMNESS_MODES}, got {randomness!r}")
        self.B = _as_matrix(B, "B")
        self.precision_bits = precision_bits
        self.value_bound = float(value_bound)
        self.noise_bits = default_noise_bits(precision_bits) if noise_bits is None else noise_bits
        self.randomness = randomness
        self.workers = workers
        self.progress = progress
        self._encoded, self._col_sums = encode_offset(self.B, precision_bits, self.value_bound)
        self._answered: set[str] = set()
        self.stats: dict[str, int] = {}

    def respond(self, request: EncryptedBlock, noise: np.ndarray | None = None) -> tuple[MaskedResponse, np.ndarray]:
        """Step 2: return the masked, re-randomised response and the responder's share (``d_a x d_b`` ints)."""
        lay = request.layout
        if (lay.precision_bits, lay.value_bound, lay.noise_bits) != (
            self.precision_bits, self.value_bound, self.noise_bits
        ):
            raise ProtocolError("request precision_bits/value_bound/noise_bits differ from the agreed parameters")
        if lay.n_rows != self.B.shape[0]:
            raise DataValidationError(f"request has {lay.n_rows} rows, the responder holds {self.B.shape[0]}")
        if request.session in self._answered:
            raise ProtocolError("this session was already answered; a second masked view is refused")
        d_a, d_b, G = request.n_cols, self.B.shape[1], request.n_groups
        N, O, n = lay.noise_offset, lay.offset, lay.n_rows
        noise_int = _check_noise(noise, (d_a, d_b), N)
        # The re-randomiser must hide the product's randomness from the key holder, who knows the factorisation
        # and can extract it: only a uniform n-th residue (full-size r^n) does that unconditionally. A short-exponent
        # h_s^alpha keeps the extracted randomness in a small structured set (e.g. always a quadratic residue mod p
        # when p = q = 1 mod 4) and would rest on short-exponent discrete logs modulo the key holder's own primes.
        enc = cached_encrypter(request.public_key.n, randomness=RERANDOMISATION)
        self._answered.add(request.session)

        bases = [[mpz(request.ciphertexts[i * G + g]) for i in range(n)] for g in range(G)]
        exps = [[int(e) for e in self._encoded[:, k]] for k in range(d_b)]
        tasks = [(g, exps[k]) for k in range(d_b) for g in range(G)]
        workers = resolve_workers(self.workers, multiexp_cost(n, lay.exponent_bits) * len(tasks) * 0.006)
        with _progress_bar(self.progress, len(tasks), "secure products") as bar:
            products = multiexp_columns(bases, tasks, enc.n2, workers, bar.update)
        self.stats = {"multiexp_mults": sum(m for _, m in products), "response_ciphertexts": len(tasks),
                      "workers": workers}

        share = np.empty((d_a, d_b), dtype=object)
        cts = []
        for t, (k, g) in enumerate((k, g) for k in range(d_b) for g in range(G)):
            cols = request.layout.group_columns(d_a, g)
            masks = [secrets.randbits(lay.mask_range_bits) for _ in cols]
            addend = pack([int(noise_int[j, k]) + N + r for j, r in zip(cols, masks, strict=True)], lay.slot_bits)
            c = enc.rerandomise(enc.add_plain(products[t][0], addend))
            cts.append(int(c))
            for j, r in zip(cols, masks, strict=True):
                share[j, k] = -(N + r) - O * self._col_sums[k] - n * O * O
        response = MaskedResponse(request.session, request.public_key, lay.slot_bits, d_a, d_b, G, cts)
        return response, share


def combine_shares(*shares: np.ndarray, precision_bits: int) -> np.ndarray:
    """``sum(shares) 2^-2p`` as float64 (correctly rounded): ``A^T B + noise`` for a complete set."""
    if not shares:
        raise ConfigurationError("combine_shares needs at least one share")
    total = np.asarray(shares[0], dtype=object).copy()
    for s in shares[1:]:
        s = np.asarray(s, dtype=object)
        if s.shape != total.shape:
            raise DataValidationError(f"share shapes differ: {s.shape} vs {total.shape}")
        total = total + s
    return decode_products(total, precision_bits)


# ----------------------------------------------------------------------------- who encrypts
_ENC_COST = {"short-exponent": 40, "standard": 530}  # per encryption, in mulmods modulo n^2 (measured)
_RERAND_COST = 1900  # responder's full-size r^n mod n^2 without the factors (~15 ms / ~8 us per mulmod, 2048 bits)
_DEC_COST = 500


def product_cost(n: int, d_enc: int, d_resp: int, *, key_bits: int = 2048,
                 precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                 noise_bits: int | None = None, randomness: str = "short-exponent") -> int:
    """Estimated work (multiplications modulo ``n^2``) when the ``d_enc`` side encrypts."""
    lay = SlotLayout(key_bits, n, precision_bits, float(value_bound),
                     default_noise_bits(precision_bits) if noise_bits is None else noise_bits)
    G = lay.n_groups(d_enc)
    per_column = multiexp_cost(n, lay.exponent_bits) + _RERAND_COST + _DEC_COST
    return G * n * _ENC_COST[randomness] + d_resp * G * per_column


def choose_encryptor(n: int, d_a: int, d_b: int, **layout: Any) -> str:
    """``"a"`` or ``"b"``: which side should hold the key and encrypt so that total work is smallest.

    The encryptor's columns are packed for free (``ceil(d / s)`` ciphertexts per row) while each
    responder column costs a multi-exponentiation, so the wider side encrypts when it fits in one group.
    """
    return "a" if product_cost(n, d_a, d_b, **layout) <= product_cost(n, d_b, d_a, **layout) else "b"


# ----------------------------------------------------------------------------- in-process entry points
@dataclass
class ProductRun:
    """Shares (oriented as ``X_a^T X_b``) and bookkeeping of one in-process run."""

    key_holder_share: np.ndarray
    responder_share: np.ndarray
    encryptor: str
    layout: SlotLayout
    extra: dict[str, Any] = field(default_factory=dict)


def run_secure_product(X_a: np.ndarray, X_b: np.ndarray, *, key_bits: int = 2048,
                       precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                       noise: np.ndarray | None = None, noise_sigma: float | None = None,
                       allow_insecure: bool = False, rng: RandomState = None, workers: int | None = None,
                       progress: bool = False, keypair: tuple | None = None, encryptor: str = "auto",
                       randomness: str = "short-exponent", noise_bits: int | None = None,
                       on_decrypt: Callable[[int], None] | None = None, precompute: bool = False) -> ProductRun:
    """Both roles in one process, through the wire format; shares of ``X_a^T X_b + noise``.

    ``noise``: integer array ``d_a x d_b`` in units ``2^-2p``; or ``noise_sigma`` (real units): a
    discrete Gaussian ``N_Z(0, (sigma 2^2p)^2)`` drawn from ``make_rng(rng)`` (Canonne et al. 2020).
    ``encryptor``: ``"a"``, ``"b"`` or ``"auto"`` (:func:`choose_encryptor`).
    """
    X_a, X_b = _as_matrix(X_a, "X_a"), _as_matrix(X_b, "X_b")
    if X_a.shape[0] != X_b.shape[0]:
        raise DataValidationError(f"row counts differ: {X_a.shape[0]} vs {X_b.shape[0]}")
    n, d_a, d_b = X_a.shape[0], X_a.shape[1], X_b.shape[1]
    if noise is not None and noise_sigma is not None:
        raise ConfigurationError("give either noise or noise_sigma, not both")
    if noise_sigma is not None:
        noise = discrete_gaussian_array(noise_sigma, (d_a, d_b), make_rng(rng), scale_bits=2 * precision_bits)
    if keypair is None:
        keypair = generate_keypair(key_bits, allow_insecure=allow_insecure)
    public_key, private_key = keypair
    if int(public_key.n).bit_length() < 2048 and not allow_insecure:
        raise KeyValidationError("keys below 2048 bits need allow_insecure=True")
    if encryptor == "auto":
        encryptor = choose_encryptor(n, d_a, d_b, key_bits=int(public_key.n).bit_length(),
                                     precision_bits=precision_bits, value_bound=value_bound, noise_bits=noise_bits)
    if encryptor not in ("a", "b"):
        raise ConfigurationError(f"encryptor must be 'a', 'b' or 'auto', got {encryptor!r}")
    X_enc, X_resp = (X_a, X_b) if encryptor == "a" else (X_b, X_a)
    noise_oriented = None if noise is None else (np.asarray(noise) if encryptor == "a" else np.asarray(noise).T)

    holder = ProductEncryptor(private_key, X_enc, precision_bits=precision_bits, value_bound=value_bound,
                              noise_bits=noise_bits, randomness=randomness, workers=workers, progress=progress,
                              on_decrypt=on_decrypt)
    responder = ProductResponder(X_resp, precision_bits=precision_bits, value_bound=value_bound,
                                 noise_bits=noise_bits, randomness=randomness, workers=workers, progress=progress)
    if precompute:
        holder.precompute_randomness()
    header, frames = holder.request().to_wire()
    response, share_resp = responder.respond(EncryptedBlock.from_wire(header, frames, public_key), noise_oriented)
    header, frames = response.to_wire()
    share_holder = holder.decrypt(MaskedResponse.from_wire(header, frames, public_key))
    if encryptor == "b":
        share_holder, share_resp = share_holder.T, share_resp.T
    return ProductRun(share_holder, share_resp, encryptor, holder.layout)


def secure_gram(X_a: np.ndarray, X_b: np.ndarray, *, key_bits: int = 2048,
                precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                noise: np.ndarray | None = None, allow_insecure: bool = False, rng: RandomState = None,
                workers: int | None = None, progress: bool = False, **options: Any) -> np.ndarray:
    """``X_a^T X_b (+ noise 2^-2p)`` computed through the real encryption, masking and decryption.

    Exact up to :func:`vfl.secure.encoding.inner_product_error_bound`. ``options`` are passed to
    :func:`run_secure_product` (``keypair``, ``encryptor``, ``randomness``, ``noise_sigma``, ``on_decrypt``...).
    """
    run = run_secure_product(X_a, X_b, key_bits=key_bits, precision_bits=precision_bits, value_bound=value_bound,
                             noise=noise, allow_insecure=allow_insecure, rng=rng, workers=workers,
                             progress=progress, **options)
    return combine_shares(run.key_holder_share, run.responder_share, precision_bits=precision_bits)


def secure_label_products(y: np.ndarray, X_b: np.ndarray, **kwargs: Any) -> np.ndarray:
    """``y^T X_b`` (a ``d_b`` vector) through the real protocol; keyword arguments as :func:`secure_gram`.

    ``noise`` (if given) has shape ``(d_b,)`` or ``(1, d_b)``.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise DataValidationError(f"y must be a 1-D label vector, got shape {y.shape}")
    if kwargs.get("noise") is not None:
        kwargs["noise"] = np.asarray(kwargs["noise"]).reshape(1, -1)
    return secure_gram(y.reshape(-1, 1), X_b, **kwargs)[0]
