"""Parallel secure products (issue 25): pinned worker buckets and the responder's re-randomiser pool.

1024-bit INSECURE test keys, real worker processes, every product checked exact against numpy.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers.streamed_product import streamed_product

from vfl.secure import ProductEncryptor, ProductResponder, generate_keypair
from vfl.secure.encoding import encode_offset_chunk, to_fixed_point_ints
from vfl.secure.executors import PinnedPool, open_executor, residues_task
from vfl.secure.keys import ciphertext_byte_length
from vfl.secure.products import EncryptedChunk, MaskedResponse, ProductStreamHeader, combine_packed_shares

P = 24


@pytest.fixture(scope="module")
def keypair():
    return generate_keypair(1024, allow_insecure=True)


def exact(A, B):
    return to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0))


def run(keypair, A, B, *, executor=None, workers=1, max_frame_bytes=None):
    """One streamed product through the wire format: (combined product, request frames, response, responder stats)."""
    limit = max_frame_bytes or 20 * ciphertext_byte_length(keypair[0])
    r = streamed_product(keypair, A, B, max_frame_bytes=limit, precision_bits=P, executor=executor, workers=workers)
    return r.total, r.frames, r.response, r.stats, r.header


def rerandomisers(keypair, B, frames, response, header):
    """The ``Enc(0)`` the responder multiplied into each response ciphertext, extracted as the key holder (who
    knows the factors) could: ``rho = c acc^-1 (1 - M n) mod n^2`` with ``acc = prod_i c_ig^{b'_ik}`` recomputed
    from the request frames and ``M = Dec(c) - Dec(acc) mod n`` (the mask, noise and offsets added in)."""
    pk, sk = keypair
    n, n2, width, G = int(pk.n), int(pk.nsquare), ciphertext_byte_length(pk), header.n_groups
    cts = [int.from_bytes(f[i:i + width], "big") for f in frames for i in range(0, len(f), width)]
    exps, _ = encode_offset_chunk(B, P, 1.0)
    out = []
    for k in range(B.shape[1]):
        for g in range(G):
            acc = 1
            for i, e in enumerate(exps[:, k].tolist()):
                acc = acc * pow(cts[i * G + g], int(e), n2) % n2
            c = int(response.ciphertexts[k * G + g])
            m = (sk.raw_decrypt(c) - sk.raw_decrypt(acc)) % n
            out.append(c * pow(acc, -1, n2) * (1 - m * n) % n2)
    return out


def test_every_response_ciphertext_gets_its_own_fresh_full_size_rerandomiser(keypair):
    """Across two products on one responder: no two response ciphertexts share a re-randomiser, each is an n-th
    residue (rho^lambda = 1 mod n^2: a genuine Enc(0)) other than 1, and the products stay exact."""
    pk, sk = keypair
    lam = math.lcm(int(sk.p) - 1, int(sk.q) - 1)
    rng = np.random.default_rng(11)
    A, B = rng.uniform(-1, 1, (30, 3)), rng.uniform(-1, 1, (30, 4))
    seen: list[int] = []
    for workers in (1, 2):
        total, frames, response, _, header = run(keypair, A, B, workers=workers)
        assert total.tolist() == exact(A, B).tolist()
        rhos = rerandomisers(keypair, B, frames, response, header)
        assert len(rhos) == B.shape[1] * header.n_groups
        assert all(r != 1 and pow(r, lam, int(pk.nsquare)) == 1 for r in rhos)
        seen += rhos
    assert len(set(seen)) == len(seen)


class RecordingExecutor(ThreadPoolExecutor):
    """A real thread pool that records which task functions were submitted, in order."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted: list[str] = []

    def submit(self, fn, /, *args, **kwargs):
        self.submitted.append(fn.__name__)
        return super().submit(fn, *args, **kwargs)


def test_rerandomisers_are_submitted_when_the_fold_opens_before_any_chunk(keypair):
    """The re-randomisers do not depend on the data: the fold starts them at open(), so they are computed while the
    key holder encrypts, and finish() only multiplies them in."""
    pk, sk = keypair
    rng = np.random.default_rng(12)
    A, B = rng.uniform(-1, 1, (25, 2)), rng.uniform(-1, 1, (25, 3))
    with RecordingExecutor() as ex:
        holder = ProductEncryptor(sk, A, response_cols=3, precision_bits=P, executor=ex)
        header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
        fold = ProductResponder(B, precision_bits=P, executor=ex).open(header)
        assert ex.submitted and set(ex.submitted) == {"residues_task"}
        for chunk in holder.encrypted_chunks():
            fold.add(EncryptedChunk.from_wire(*chunk.to_wire(), header))
        response, share_b = fold.finish()
        after_open = ex.submitted[ex.submitted.index("encrypt_rows_task"):]
        assert "residues_task" not in after_open
        share_a = holder.decrypt(MaskedResponse.from_wire(*response.to_wire(), pk))
    total = combine_packed_shares(share_a, share_b, layout=header.layout, n_cols=2, modulus=int(pk.n))
    assert total.tolist() == exact(A, B).tolist()


def test_residues_task_gives_the_n_th_power_of_each_draw(keypair):
    pk, _ = keypair
    n = int(pk.n)
    draws = [3, 5, n - 2]
    assert residues_task((n, None, None, "standard", None), draws) == [pow(r, n, n * n) for r in draws]


@pytest.mark.parametrize("d_b", [4, 1])
def test_two_pinned_workers_keep_buckets_across_chunks_with_one_workers_multiplications(keypair, d_b):
    """Two local workers (a PinnedPool) keep Pippenger buckets per worker across all chunks: by columns when there
    are at least as many columns as workers, else by chunks dealt round-robin. The product is exact and identical
    to one worker's; by columns they count exactly one worker's multiplications; either way fewer than one
    multi-exponentiation per chunk (a plain thread pool executor)."""
    rng = np.random.default_rng(13 + d_b)
    A, B = rng.uniform(-1, 1, (200, 3)), rng.uniform(-1, 1, (200, d_b))
    one = run(keypair, A, B, workers=1)
    with open_executor(None, 2) as pool:
        assert isinstance(pool, PinnedPool) and pool.workers == 2
        two = run(keypair, A, B, executor=pool)
    with ThreadPoolExecutor(2) as threads:
        per_chunk = run(keypair, A, B, executor=threads)
    assert one[0].tolist() == two[0].tolist() == per_chunk[0].tolist() == exact(A, B).tolist()
    assert two[4].n_chunks == 10
    if d_b >= 2:
        assert two[3]["multiexp_mults"] == one[3]["multiexp_mults"]
    assert two[3]["multiexp_mults"] < per_chunk[3]["multiexp_mults"]


def test_an_abandoned_fold_frees_its_worker_buckets(keypair):
    """A fold closed before finish() (a failed run) tells its pinned workers to drop its buckets: a pool that
    outlives the fold (a party's executor for the whole run) does not keep them."""
    pk, sk = keypair
    rng = np.random.default_rng(14)
    A, B = rng.uniform(-1, 1, (60, 2)), rng.uniform(-1, 1, (60, 2))
    with open_executor(None, 2) as pool:
        holder = ProductEncryptor(sk, A, response_cols=2, precision_bits=P, executor=pool,
                                  max_frame_bytes=20 * ciphertext_byte_length(pk))
        header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
        fold = ProductResponder(B, precision_bits=P, executor=pool).open(header)
        chunk = next(holder.encrypted_chunks())
        fold.add(EncryptedChunk.from_wire(*chunk.to_wire(), header))
        # tasks sent to one worker run in order: this count comes after the chunk went into the buckets
        assert sum(pool.submit_to(p, _bucket_folds).result(timeout=120) for p in range(2)) >= 1
        fold.close()
        counts = [pool.submit_to(p, _bucket_folds).result(timeout=120) for p in range(2)]
    assert counts == [0, 0]


def _bucket_folds() -> int:
    from vfl.secure import executors

    return len(executors._FOLD_BUCKETS)


def test_one_workers_rerandomisers_are_computed_while_the_fold_waits_for_chunks(keypair):
    """With one worker the re-randomisers run on a background thread from open(): they are all ready before the
    first chunk arrives (a network party's thread is idle while the key holder encrypts), not after the last."""
    import time

    pk, sk = keypair
    rng = np.random.default_rng(15)
    A, B = rng.uniform(-1, 1, (20, 2)), rng.uniform(-1, 1, (20, 3))
    holder = ProductEncryptor(sk, A, response_cols=3, precision_bits=P, workers=1)
    header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
    fold = ProductResponder(B, precision_bits=P, workers=1).open(header)
    deadline = time.monotonic() + 120
    while not all(f.done() for f in fold._rerandomisers) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fold._rerandomisers and all(f.done() for f in fold._rerandomisers)   # no chunk was added yet
    for chunk in holder.encrypted_chunks():
        fold.add(EncryptedChunk.from_wire(*chunk.to_wire(), header))
    response, share_b = fold.finish()
    share_a = holder.decrypt(MaskedResponse.from_wire(*response.to_wire(), pk))
    total = combine_packed_shares(share_a, share_b, layout=header.layout, n_cols=2, modulus=int(pk.n))
    assert total.tolist() == exact(A, B).tolist()


def test_a_request_that_fits_one_frame_is_cut_into_pipeline_chunks(keypair):
    """517 rows fit one frame, but the key holder cuts them into 4 chunks of 130 rows so that the responder folds
    one chunk while the next is encrypted (issue 25); under 256 rows a request stays one chunk. Exact either way."""
    from vfl.secure.products import pipeline_chunk_rows

    assert [pipeline_chunk_rows(n) for n in (100, 255, 256, 517, 10**5)] == [100, 255, 128, 130, 25_000]
    rng = np.random.default_rng(16)
    A, B = rng.uniform(-1, 1, (517, 2)), rng.uniform(-1, 1, (517, 2))
    total, frames, _, stats, header = run(keypair, A, B, max_frame_bytes=2**20)
    assert header.chunk_rows == 130 and len(frames) == stats["chunks"] == 4
    assert total.tolist() == exact(A, B).tolist()


def test_buckets_lost_in_a_worker_refuse_the_product_instead_of_dropping_rows(keypair):
    """Each worker reports how many chunks its buckets hold; a worker that lost them (here: told to discard them,
    as a replaced process would have) makes finish() refuse, never return a product without those rows."""
    from vfl.exceptions import ProtocolError
    from vfl.secure.executors import bucket_discard_task

    pk, sk = keypair
    rng = np.random.default_rng(17)
    A, B = rng.uniform(-1, 1, (60, 2)), rng.uniform(-1, 1, (60, 2))
    with open_executor(None, 2) as pool:
        holder = ProductEncryptor(sk, A, response_cols=2, precision_bits=P, executor=pool,
                                  max_frame_bytes=20 * ciphertext_byte_length(pk))
        header = ProductStreamHeader.from_wire(*holder.stream_header().to_wire(), pk)
        fold = ProductResponder(B, precision_bits=P, executor=pool).open(header)
        for chunk in holder.encrypted_chunks():
            fold.add(EncryptedChunk.from_wire(*chunk.to_wire(), header))
            if chunk.index == 1:
                pool.submit_to(0, bucket_discard_task, fold._token).result(timeout=120)
        with pytest.raises(ProtocolError, match="holds 1 of the 3 chunks"):
            fold.finish()


def test_the_key_holders_own_local_workers_get_its_factors_other_executors_never(keypair):
    """A PinnedPool passed in (as a CLI party passes its per-run pool) is the party's own processes: its encryption
    tasks get p and q for CRT encryption (identical ciphertexts, less CPU); any other executor gets n and h_s only."""

    class Recording(PinnedPool):
        states: list = []

        def submit_to(self, index, fn, /, *args, **kwargs):
            if fn.__name__ == "encrypt_rows_task":
                self.states.append(args[0])
            return super().submit_to(index, fn, *args, **kwargs)

    class RecordingThreads(RecordingExecutor):
        states: list = []

        def submit(self, fn, /, *args, **kwargs):
            if fn.__name__ == "encrypt_rows_task":
                self.states.append(args[0])
            return super().submit(fn, *args, **kwargs)

    pk, sk = keypair
    rng = np.random.default_rng(18)
    A, B = rng.uniform(-1, 1, (40, 2)), rng.uniform(-1, 1, (40, 2))
    pool = Recording(2)
    try:
        local = run(keypair, A, B, executor=pool)
    finally:
        pool.shutdown()
    with RecordingThreads() as threads:
        other = run(keypair, A, B, executor=threads)
    assert pool.states and all(s[1] == int(sk.p) and s[2] == int(sk.q) for s in pool.states)
    assert threads.states and all(s[1] is None and s[2] is None for s in threads.states)
    assert local[0].tolist() == other[0].tolist() == exact(A, B).tolist()
