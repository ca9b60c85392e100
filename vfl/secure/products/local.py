"""In-process entry points: both roles of the packed secure product in one process (tests, benchmarks, one-machine
runs; see :mod:`vfl.secure.products`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    KeyValidationError,
)
from vfl.rng import RandomState, make_rng
from vfl.secure.discrete_noise import discrete_gaussian_array
from vfl.secure.encoding import DEFAULT_PRECISION_BITS, decode_products
from vfl.secure.keys import (
    generate_keypair,
)
from vfl.secure.packing import SlotLayout
from vfl.secure.products.common import _as_matrix
from vfl.secure.products.cost import choose_encryptor
from vfl.secure.products.encryptor import ProductEncryptor
from vfl.secure.products.responder import ProductResponder
from vfl.secure.products.shares import combine_packed_shares
from vfl.secure.products.wire import EncryptedBlock


@dataclass
class ProductRun:
    """Packed shares and bookkeeping of one in-process run.

    Both shares are ``d_resp x n_groups`` ints modulo ``modulus`` (the Paillier ``n``) in the encryptor's
    orientation, as the two parties send them; :meth:`combined` is what the coordinator computes from them.
    """

    key_holder_share: np.ndarray
    responder_share: np.ndarray
    encryptor: str
    layout: SlotLayout
    n_enc_cols: int
    modulus: int
    extra: dict[str, Any] = field(default_factory=dict)

    def combined(self) -> np.ndarray:
        """``X_a^T X_b + noise`` as exact integers in units ``2^-2p`` (``d_a x d_b``), via
        :func:`combine_packed_shares` (range-checked)."""
        total = combine_packed_shares(self.key_holder_share, self.responder_share, layout=self.layout,
                                      n_cols=self.n_enc_cols, modulus=self.modulus,
                                      encryptor=f"party {self.encryptor}")
        return total if self.encryptor == "a" else total.T


def run_secure_product(X_a: np.ndarray, X_b: np.ndarray, *, key_bits: int = 2048,
                       precision_bits: int = DEFAULT_PRECISION_BITS, value_bound: float = 1.0,
                       noise: np.ndarray | None = None, noise_sigma: float | None = None,
                       allow_insecure: bool = False, rng: RandomState = None, workers: int | None = None,
                       progress: bool = False, keypair: tuple | None = None, encryptor: str = "auto",
                       randomness: str = "short-exponent", noise_bits: int | None = None,
                       on_decrypt: Callable[[int], None] | None = None, precompute: bool = False,
                       executor: Any = None, key_holder_noise: np.ndarray | None = None) -> ProductRun:
    """Both roles in one process, through the wire format; packed shares of ``X_a^T X_b + noise``.

    ``noise``: the responder's integer noise, array ``d_a x d_b`` in units ``2^-2p``; or ``noise_sigma`` (real
    units): a discrete Gaussian ``N_Z(0, (sigma 2^2p)^2)`` drawn from ``make_rng(rng)`` (Canonne et al. 2020).
    ``key_holder_noise``: the key holder's own noise share (same shape and units), added after decryption.
    ``encryptor``: ``"a"``, ``"b"`` or ``"auto"`` (:func:`choose_encryptor`). ``executor``: where both roles'
    heavy work runs (:mod:`vfl.secure.executors`).
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
    def oriented(arr: np.ndarray | None) -> np.ndarray | None:
        return None if arr is None else (np.asarray(arr) if encryptor == "a" else np.asarray(arr).T)

    noise_oriented = oriented(noise)

    holder = ProductEncryptor(private_key, X_enc, response_cols=X_resp.shape[1], precision_bits=precision_bits,
                              value_bound=value_bound,
                              noise_bits=noise_bits, randomness=randomness, workers=workers, progress=progress,
                              on_decrypt=on_decrypt, executor=executor)
    responder = ProductResponder(X_resp, precision_bits=precision_bits, value_bound=value_bound,
                                 noise_bits=noise_bits, randomness=randomness, workers=workers, progress=progress,
                                 executor=executor)
    if precompute:
        holder.precompute_randomness()
    header, frames = holder.request().to_wire()
    response, share_resp = responder.respond(EncryptedBlock.from_wire(header, frames, public_key), noise_oriented)
    header, frames = response.to_wire()
    share_holder = holder.decrypt(holder.response_from_wire(header, frames), noise=oriented(key_holder_noise))
    return ProductRun(share_holder, share_resp, encryptor, holder.layout, holder.n_cols, int(public_key.n))


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
    return decode_products(run.combined(), precision_bits)


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
