"""One streamed secure product with both roles in the test's process, through the wire format (not a test module).

The key holder's request header and every chunk frame, and the responder's masked response, are serialised and
parsed exactly as the network roles do; the coordinator's combination of the two packed shares gives the product.
Shared by the streaming, parallel-worker and Dask tests so that all three exercise the same sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vfl.secure import ProductEncryptor, ProductResponder
from vfl.secure.products import EncryptedChunk, MaskedResponse, ProductStreamHeader, combine_packed_shares


@dataclass
class StreamedRun:
    share_a: Any       # the key holder's packed share
    share_b: Any       # the responder's packed share
    frames: list       # every request chunk frame as sent
    response: Any      # the masked response as sent
    total: Any         # the combined product (exact ints, units 2^-2p)
    stats: dict        # the responder's statistics (multiplications, ...)
    header: ProductStreamHeader


def streamed_product(keypair: tuple, A: Any, B: Any, *, max_frame_bytes: int, precision_bits: int = 24,
                     noise: Any = None, executor: Any = None, workers: int = 1) -> StreamedRun:
    pk, sk = keypair
    holder = ProductEncryptor(sk, A, response_cols=getattr(B, "n_cols", None) or B.shape[1],
                              precision_bits=precision_bits, workers=workers, executor=executor,
                              max_frame_bytes=max_frame_bytes)
    responder = ProductResponder(B, precision_bits=precision_bits, workers=workers, executor=executor)
    header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
    fold = responder.open(header, noise)
    frames = []
    for chunk in holder.encrypted_chunks():
        wire, frame = chunk.to_wire()
        frames.append(frame[0])
        fold.add(EncryptedChunk.from_wire(wire, frame, header))
    response, share_b = fold.finish()
    share_a = holder.decrypt(MaskedResponse.from_wire(*response.to_wire(), pk))
    total = combine_packed_shares(share_a, share_b, layout=header.layout, n_cols=header.n_cols, modulus=int(pk.n))
    return StreamedRun(share_a, share_b, frames, response, total, responder.stats, header)
