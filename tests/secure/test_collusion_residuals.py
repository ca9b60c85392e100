"""What a party working with the coordinator still gets from a secure product (docs/threat_model.md, "A party
together with the coordinator" and "Residual risks").

(a) The full-space mask hides the responder's table from the encryptor's *decryption*, but the coordinator combines
the two packed shares, and the combined value ``Z = S^A + S^B mod n`` carries whatever the encryptor packed. When the
red team's probe (row ``j`` at bit offset ``T + 40 j`` above the declared slots) is combined, the range check fails
and the run stops naming the encryptor -- yet a coordinator colluding with that encryptor already holds ``Z`` and
reads the responder's rows from it exactly. (b) A malicious *responder* party answering with the key holder's own
request ciphertexts re-randomised (valid signature: it is the responder the plan names) makes the key holder's packed
share carry at most ``response_cols x n_groups`` of its own fixed-point rows; what stands between those rows and a
colluding coordinator is the key holder's own noise draw, whose standard deviation in those units is more than 10^6
times the largest echoed value for every plan a default policy accepts (epsilon <= 10).

FAST TESTS: 1536-bit and 1024-bit INSECURE test keys.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import ProtocolError
from vfl.secure import EncryptedBlock, MaskedResponse, ProductEncryptor, ProductResponder, generate_keypair
from vfl.secure.encoding import to_fixed_point_ints
from vfl.secure.fastmath import cached_encrypter
from vfl.secure.keys import ciphertexts_to_bytes
from vfl.secure.products import centring_constant, combine_packed_shares, pack_slots

P = 24
ROWS, WINDOW = 30, 40


@pytest.fixture(scope="module")
def probe_keypair():
    return generate_keypair(1536, allow_insecure=True)


@pytest.fixture(scope="module")
def keypair():
    return generate_keypair(1024, allow_insecure=True)


def _probe_request(keypair) -> EncryptedBlock:
    """An honest ``ROWS x 1`` header with row ``j`` encrypting ``2^(w + 40 j)`` (above the declared slot)."""
    pk, sk = keypair
    header = ProductEncryptor(sk, np.zeros((ROWS, 1)), response_cols=1, precision_bits=P, workers=1).stream_header()
    w = header.layout.slot_bits
    enc = cached_encrypter(pk.n)
    block = EncryptedBlock(header.session, pk, header.layout, 1,
                           [int(enc.encrypt(1 << (w + WINDOW * j))) for j in range(ROWS)])
    return EncryptedBlock.from_wire(*block.to_wire(), pk)


def test_an_encryptor_with_the_coordinator_reads_the_responders_rows_from_the_combined_shares(probe_keypair):
    pk, sk = probe_keypair
    n = int(pk.n)
    B = np.random.default_rng(40).uniform(-1, 1, (ROWS, 3))
    request = _probe_request(probe_keypair)
    response, share_b = ProductResponder(B, precision_bits=P, workers=1).respond(request)
    lay = request.layout
    # the encryptor's share by the honest formula for the all-zero operand it declared
    declared = pack_slots(np.full((1, 3), lay.offset * lay.n_rows * lay.offset, dtype=object), lay, n)
    share_a = np.array([[(sk.raw_decrypt(int(c)) + int(declared[k, 0])) % n]
                        for k, c in enumerate(response.ciphertexts)], dtype=object)
    with pytest.raises(ProtocolError, match="party alice"):     # the honest coordinator stops the run ...
        combine_packed_shares(share_a, share_b, layout=lay, n_cols=1, modulus=n, encryptor="party alice")
    # ... but a colluding one holds Z = S^A + S^B mod n: window j above the slot is row j of B (plus the offset O)
    Z = [(int(share_a[k, 0]) + int(share_b[k, 0])) % n for k in range(3)]
    w, O = lay.slot_bits, lay.offset
    read = np.array([[((z >> (w + WINDOW * j)) & ((1 << WINDOW) - 1)) - O for z in Z] for j in range(ROWS)],
                    dtype=object)
    assert read.tolist() == to_fixed_point_ints(B, P, 1.0).tolist()          # 30 of 30 rows, exact


def _echo(holder: ProductEncryptor, block: EncryptedBlock, rows: int) -> MaskedResponse:
    """A responder's "response": the first ``rows`` request ciphertexts (all groups) times a fresh r^n."""
    pk = holder.public_key
    header, _ = block.to_wire()
    enc = cached_encrypter(pk.n, randomness="standard")
    fresh = [int(enc.rerandomise(c)) for c in block.ciphertexts[: rows * block.n_groups]]
    wire = {"kind": MaskedResponse.KIND, "version": 1, "session": header["session"],
            "key_fingerprint": header["key_fingerprint"], "ciphertext_bytes": header["ciphertext_bytes"],
            "slot_bits": header["slot_bits"], "n_enc_cols": header["n_cols"], "n_resp_cols": rows,
            "n_groups": block.n_groups}
    return holder.response_from_wire(wire, [ciphertexts_to_bytes(pk, fresh)])


def test_a_responders_rerandomised_echo_reaches_the_coordinator_only_under_the_key_holders_noise(keypair):
    _, sk = keypair
    rng = np.random.default_rng(41)
    A = rng.uniform(-1, 1, (10, 3))                       # the key holder's table
    holder = ProductEncryptor(sk, A, response_cols=2, precision_bits=P, workers=1)
    block = holder.request()
    noise = rng.integers(-(1 << 50), 1 << 50, (3, 2)).astype(object)    # its own draw (units 2^-2p)
    share = holder.decrypt(_echo(holder, block, 2), noise=noise)
    n, lay = int(holder.public_key.n), holder.layout
    A_int = to_fixed_point_ints(A, P, 1.0)
    # a share that undoes the key holder's column-sum correction and adds the centring constant (the colluders would
    # estimate the column sums; the test uses the true ones): the coordinator's combination then passes its range
    # check and holds rows 0 and 1 of the key holder's table, each value under the key holder's own noise draw
    undo = np.outer(lay.offset * A_int.sum(axis=0), np.ones(2, dtype=int)).astype(object) + centring_constant(lay)
    combined = combine_packed_shares(share, pack_slots(undo, lay, n), layout=lay, n_cols=3, modulus=n)
    assert combined.tolist() == [[int(A_int[k, j]) + lay.offset + int(noise[j, k]) for k in range(2)]
                                 for j in range(3)]


def test_the_key_holders_noise_draw_dwarfs_an_echoed_value_in_every_accepted_plan():
    """sigma_raw = std / |scale| 2^(2p) of one party's draw on a cross-block entry (as the coordinator's magnitude
    check computes it) against 2^(p+1), the largest echoed fixed-point value, at epsilon 10 (the default
    --max-epsilon) and the forest-fires and 10^5 row counts."""
    from vfl.protocols.contracts import Registration
    from vfl.protocols.fm_release import FMCoordinator
    from vfl.protocols.settings import RunSettings

    for n_rows in (517, 100_000):
        regs = [Registration(peer=b"A", name="alice", n_rows=n_rows, features=[f"a{i}" for i in range(12)],
                             label_owner=True),
                Registration(peer=b"B", name="bob", n_rows=n_rows, features=[f"b{i}" for i in range(14)],
                             label_owner=False)]
        c = FMCoordinator(RunSettings(n_parties=2, model="linear", mechanism="gaussian-fm", epsilon=10.0,
                                      key_bits=2048, precision_bits=P), regs)
        for b in c.plan.cross_blocks():
            sigma_raw = c.mech.entry_noise(b).std / abs(c.plan.scale(b, n_rows)) * 2.0 ** (2 * P)
            assert sigma_raw > 1e6 * 2.0 ** (P + 1), (n_rows, b.name, sigma_raw)
            assert math.isfinite(sigma_raw)
