"""Packed, masked Paillier cross-party products ``A^T B`` as pure message-in/message-out roles.

Protocol (one round trip; ``A`` is ``n x d_a`` at the key holder, ``B`` is ``n x d_b`` at the responder;
offset fixed-point encoding of :mod:`vfl.secure.encoding`, slot layout of :mod:`vfl.secure.packing`):

1. Key holder (:class:`ProductEncryptor`) encodes ``a'_ij = round(a_ij 2^p) + O`` and sends
   ``c_ig = Enc(sum_{j in g} a'_ij 2^(w slot(j)))`` for every row ``i`` and column group ``g``
   (:class:`EncryptedBlock`: ``n * ceil(d_a / s)`` ciphertexts instead of ``n d_a``).
2. Responder (:class:`ProductResponder`) computes per column ``k`` and group ``g`` the
   multi-exponentiation ``prod_i c_ig^{b'_ik} = Enc(P_kg)``, ``P_kg = sum_j 2^(w j) sum_i a'_ij b'_ik``, multiplies
   in ``g^M`` with ``M = R_kg + pack_g(noise^B_jk + C) mod n``, where ``R_kg`` is uniform on ``[0, n)`` (the whole
   plaintext space, :func:`secrets.randbelow`), ``noise^B`` its DP noise in units ``2^-2p`` and ``C`` the public
   centring constant (:func:`centring_constant`), and a fresh ``Enc(0) = r^n`` with ``r`` uniform in ``Z*_n``
   (re-randomisation: phe never does this; always full-size, never short-exponent, since the key holder can
   extract the randomness). Its packed share is ``S^B_kg = -R_kg - pack_g(O sum_i b_int_ik + n O^2) mod n``.
3. Key holder decrypts ``D_kg = P_kg + M_kg mod n`` and keeps the packed share
   ``S^A_kg = D_kg - pack_g(O sum_i a_int_ij) + pack_g(noise^A_jk) mod n`` (its own noise share, optional).

Here ``pack_g(x_j) = sum_{j in g} 2^(w slot(j)) x_j`` with signed ``x_j``, reduced mod ``n``. Then
``S^A + S^B = pack_g(sum_i a_int_ij b_int_ik + noise^A_jk + noise^B_jk + C) mod n`` exactly; only whoever holds
both shares (the coordinator) recovers the slots, with :func:`combine_packed_shares`, which also checks that every
slot lies in its declared range and nothing lies above the last slot (else the encryptor's operand was not what its
header declared: :class:`ProtocolError` naming it). What each side sees: the responder only ciphertexts under a key
it does not hold; the key holder only ``D_kg``, exactly uniform on ``[0, n)`` whatever it encrypted (one-time pad
modulo ``n``), so even an encryptor that packs values outside its declared slots learns nothing from it.
The decryption audit hook ``on_decrypt`` sees every plaintext the key holder decrypts.
The responder answers each session once.

The package keeps one concern per module (issue 30; the seams the single module marked): :mod:`.wire` (the messages,
their limits and checks), :mod:`.common` (helpers of both roles), :mod:`.encryptor` (the key holder),
:mod:`.responder` (the responder's fold), :mod:`.shares` (packing and combining the shares), :mod:`.cost` (who
encrypts) and :mod:`.local` (both roles in one process). Every name is importable from here as before.
"""

from __future__ import annotations

from vfl.secure.products.cost import (
    choose_encryptor,
    product_cost,
)
from vfl.secure.products.encryptor import (
    ProductEncryptor,
)
from vfl.secure.products.local import (
    ProductRun,
    run_secure_product,
    secure_gram,
    secure_label_products,
)
from vfl.secure.products.responder import (
    ProductResponder,
    ResponderFold,
)
from vfl.secure.products.shares import (
    add_packed,
    centring_constant,
    combine_packed_shares,
    combine_shares,
    pack_slots,
)
from vfl.secure.products.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    MAX_COLS,
    MAX_ECHO_TAGS,
    MAX_FRAME_BYTES,
    MAX_ROWS,
    MIN_PIPELINE_ROWS,
    PIPELINE_CHUNKS,
    RERANDOMISATION,
    WIRE_VERSION,
    ChunkGate,
    EchoTags,
    EncryptedBlock,
    EncryptedChunk,
    MaskedResponse,
    ProductStreamHeader,
    pipeline_chunk_rows,
    stream_chunk_rows,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "ChunkGate",
    "EchoTags",
    "EncryptedBlock",
    "EncryptedChunk",
    "MAX_COLS",
    "MAX_ECHO_TAGS",
    "MAX_FRAME_BYTES",
    "MAX_ROWS",
    "MIN_PIPELINE_ROWS",
    "MaskedResponse",
    "PIPELINE_CHUNKS",
    "ProductEncryptor",
    "ProductResponder",
    "ProductRun",
    "ProductStreamHeader",
    "RERANDOMISATION",
    "ResponderFold",
    "WIRE_VERSION",
    "add_packed",
    "centring_constant",
    "choose_encryptor",
    "combine_packed_shares",
    "combine_shares",
    "pack_slots",
    "pipeline_chunk_rows",
    "product_cost",
    "run_secure_product",
    "secure_gram",
    "secure_label_products",
    "stream_chunk_rows",
]
