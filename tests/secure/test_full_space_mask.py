"""Issue 20, "a malicious encryptor alone learns nothing": the responder masks the whole Paillier plaintext space.

The red team's probe (issue 20, items 1-2): an encryptor declares an honest layout (``n`` rows, ``d_a`` columns) but
encrypts, for row ``j``, the value ``2^(T + 40 j)`` with ``T = d_a w`` just above its declared slots, so that
``sum_i a'_i b'_ik`` puts row ``j`` of the responder's column ``k`` into its own 40-bit window of the plaintext. With
per-slot masks those windows came back unmasked and un-noised (30/30 rows of the responder's table); with one uniform
mask ``R_kg`` in ``[0, n)`` per response ciphertext the decryption is uniform whatever was encrypted, and the
coordinator's combination of the packed shares finds the operand outside its declared slots and stops, naming the
encryptor.

FAST TESTS: 1536-bit INSECURE test keys (room for 30 rows x 40 bits above a declared slot) and 1024-bit ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vfl.exceptions import ProtocolError
from vfl.secure import EncryptedBlock, ProductEncryptor, ProductResponder, generate_keypair
from vfl.secure.discrete_noise import discrete_gaussian_array
from vfl.secure.encoding import to_fixed_point_ints
from vfl.secure.fastmath import cached_encrypter

P = 24
ROWS, WINDOW = 30, 40
ALPHA = 1e-9
"""Masks come from ``secrets`` (unseedable): each statistical check at level 1e-9, so a false failure is ~1e-8 per run;
the unmasked probe gives p-values ~ 0."""


@pytest.fixture(scope="module")
def probe_keypair():
    return generate_keypair(1536, allow_insecure=True)


@pytest.fixture(scope="module")
def keypair():
    return generate_keypair(1024, allow_insecure=True)


def hostile_request(keypair, n_rows: int, n_cols: int, plaintexts: list[int]) -> EncryptedBlock:
    """What the malicious encryptor sends: the header of an honest ``n_rows x n_cols`` operand (a fresh session),
    with ciphertexts of ``plaintexts`` (one group per row) instead of its packed rows; through the wire format."""
    pk, sk = keypair
    header = ProductEncryptor(sk, np.zeros((n_rows, n_cols)), response_cols=1, precision_bits=P,
                              workers=1).stream_header()
    assert header.n_groups == 1 and len(plaintexts) == n_rows
    enc = cached_encrypter(pk.n)
    block = EncryptedBlock(header.session, pk, header.layout, n_cols, [int(enc.encrypt(m)) for m in plaintexts])
    return EncryptedBlock.from_wire(*block.to_wire(), pk)


def probe_plaintexts(block_layout_bits: int, n_cols: int) -> list[int]:
    """Row ``j`` encrypts ``2^(T + 40 j)``, ``T = n_cols w``: the top of the declared slots."""
    return [1 << (n_cols * block_layout_bits + WINDOW * j) for j in range(ROWS)]


def run_probe(keypair, B: np.ndarray, noise: np.ndarray | None = None):
    """The attack end to end: (what the attacker decrypts, per responder column; the response; the responder's
    share; the request)."""
    _, sk = keypair
    w = ProductEncryptor(sk, np.zeros((ROWS, 1)), response_cols=1, precision_bits=P).layout.slot_bits
    request = hostile_request(keypair, ROWS, 1, probe_plaintexts(w, 1))
    response, share_b = ProductResponder(B, precision_bits=P, workers=1).respond(request, noise)
    return [sk.raw_decrypt(int(c)) for c in response.ciphertexts], response, share_b, request


def red_team_rows(decrypted: list[int], B: np.ndarray, slot_bits: int) -> int:
    """The red team's decoding: row ``j`` of column ``k`` is window ``j`` above ``T = w`` minus the offset ``O``.
    Returns how many of the responder's rows it recovers exactly (every column)."""
    O = 1 << P
    B_int = to_fixed_point_ints(B, P, 1.0)
    windows = [[((d >> (slot_bits + WINDOW * j)) & ((1 << WINDOW) - 1)) - O for d in decrypted] for j in range(ROWS)]
    return sum(all(int(windows[j][k]) == int(B_int[j, k]) for k in range(B.shape[1])) for j in range(ROWS))


# ----------------------------------------------------------------------------- (a) the encryptor learns nothing
def test_the_red_team_probe_recovers_no_row_of_the_responders_table(probe_keypair):
    """Fails on 9ac3130 (30/30 rows: per-slot masks left the windows above the declared slot in the clear)."""
    rng = np.random.default_rng(20)
    B = rng.uniform(-1, 1, (ROWS, 3))
    noise = discrete_gaussian_array(0.5, (1, 3), rng, scale_bits=2 * P)
    decrypted, response, _, _ = run_probe(probe_keypair, B, noise)
    assert len(decrypted) == 3
    assert red_team_rows(decrypted, B, response.slot_bits) == 0


def test_the_decoding_is_the_working_attack_when_the_mask_is_missing(probe_keypair, monkeypatch):
    """The test above can fail: with the full-space mask forced to 0 the same decoding reads 30/30 rows."""
    import vfl.secure.products.responder as products  # where the mask is drawn

    monkeypatch.setattr(products.secrets, "randbelow", lambda k: 0)
    B = np.random.default_rng(21).uniform(-1, 1, (ROWS, 3))
    decrypted, response, _, _ = run_probe(probe_keypair, B)
    assert red_team_rows(decrypted, B, response.slot_bits) == ROWS


def test_probe_decryptions_are_uniform_and_independent_of_the_responders_table(probe_keypair):
    """12 probes x 16 response ciphertexts against each of two tables (all +1; uniform): the decryptions / n are
    U(0, 1) (KS), the 4 low bits of row 0's window are uniform (chi-square), and the two tables' samples are
    indistinguishable (two-sample KS). Fails on 9ac3130 (row 0's window is b'_0k: constant for the all +1 table)."""
    n = int(probe_keypair[0].n)
    tables = {"ones": np.ones((ROWS, 16)), "uniform": np.random.default_rng(22).uniform(-1, 1, (ROWS, 16))}
    samples = {}
    for name, B in tables.items():
        values, window_bits = [], []
        for _ in range(12):
            decrypted, response, _, _ = run_probe(probe_keypair, B)
            values += [d / n for d in decrypted]
            window_bits += [(d >> response.slot_bits) & 15 for d in decrypted]
        samples[name] = np.array(values)
        assert stats.kstest(values, "uniform").pvalue > ALPHA, name
        assert stats.chisquare(np.bincount(window_bits, minlength=16)).pvalue > ALPHA, name
    assert stats.ks_2samp(samples["ones"], samples["uniform"]).pvalue > ALPHA


# ----------------------------------------------------------------------------- (b) the combination names it
def test_the_combined_shares_of_a_probe_are_refused_naming_the_encryptor(probe_keypair):
    from vfl.secure.products import combine_packed_shares, pack_slots

    pk, _ = probe_keypair
    B = np.random.default_rng(23).uniform(-1, 1, (ROWS, 3))
    decrypted, _, share_b, request = run_probe(probe_keypair, B)
    lay, n = request.layout, int(pk.n)
    # the attacker's share by the honest formula for the all-zero operand it declared (a' = 0: column sum -n O)
    declared = pack_slots(np.full((1, 3), lay.offset * lay.n_rows * lay.offset, dtype=object), lay, n)
    share_a = np.array([[(d + int(declared[k, 0])) % n] for k, d in enumerate(decrypted)], dtype=object)
    with pytest.raises(ProtocolError, match="party alice's encrypted operand is not what its request declared"):
        combine_packed_shares(share_a, share_b, layout=lay, n_cols=1, modulus=n, encryptor="party alice")
    # whatever share the attacker sends: it would have to cancel the probe's windows, i.e. know B
    for _ in range(20):
        guess = np.array([[int.from_bytes(np.random.default_rng().bytes(200), "big") % n] for _ in range(3)],
                         dtype=object)
        with pytest.raises(ProtocolError, match="party alice"):
            combine_packed_shares(guess, share_b, layout=lay, n_cols=1, modulus=n, encryptor="party alice")


@pytest.mark.parametrize("where", ["slot range", "above the last slot"])
def test_one_amplified_entry_outside_the_declared_slot_is_refused(keypair, where):
    """A single operand entry ``2^(v+1)`` (inside the slot width, outside the declared range) or ``2^w`` (the next
    slot position of a one-column layout) makes the combined product fail its range check."""
    from vfl.secure.products import combine_packed_shares

    pk, sk = keypair
    n_rows = 5
    lay = ProductEncryptor(sk, np.zeros((n_rows, 1)), response_cols=1, precision_bits=P).layout
    O = lay.offset
    value = (1 << (lay.value_bits + 1)) if where == "slot range" else (1 << lay.slot_bits)
    request = hostile_request(keypair, n_rows, 1, [value] + [O] * (n_rows - 1))   # a' = O: a = 0 elsewhere
    response, share_b = ProductResponder(np.ones((n_rows, 2)), precision_bits=P, workers=1).respond(request)
    # the attacker's share by the honest formula for the operand it declared (a = 0: no column-sum correction)
    share_a = np.array([[sk.raw_decrypt(int(c))] for c in response.ciphertexts], dtype=object)
    with pytest.raises(ProtocolError, match="party mallory"):
        combine_packed_shares(share_a, share_b, layout=lay, n_cols=1, modulus=int(pk.n), encryptor="party mallory")


def test_the_fm_coordinator_stops_a_probing_encryptor_and_names_it(probe_keypair):
    """Socket-free, through the real wire encoding: alice (the encryptor of M[0,1]) sends an honest-looking
    ENC_REQUEST carrying the probe; bob answers honestly; the coordinator combines the SHAREs with the layout of the
    request it relayed and stops the run naming alice."""
    from vfl.net.messages import decode, encode, message_of
    from vfl.protocols.contracts import Out, Registration
    from vfl.protocols.fm_release import FMCoordinator, product_shape
    from vfl.protocols.settings import RunSettings
    from vfl.secure import public_key_to_bytes
    from vfl.secure.products import ProductStreamHeader, pack_slots

    rows = 20
    regs = [Registration(peer=b"A", name="alice", n_rows=rows, features=["a0", "a1"], label_owner=True),
            Registration(peer=b"B", name="bob", n_rows=rows, features=["b0"], label_owner=False)]
    coordinator = FMCoordinator(RunSettings(n_parties=2, model="linear", mechanism="none", key_bits=1536,
                                            allow_insecure_keys=True, fit_intercept=False, precision_bits=P), regs)
    block = next(b for b in coordinator.plan.cross_blocks() if b.encryptor == 0)
    d_enc, d_resp = product_shape(coordinator.plan, block)
    pk, sk = probe_keypair
    w = ProductEncryptor(sk, np.zeros((rows, d_enc)), response_cols=1, precision_bits=P).layout.slot_bits
    probe = [1 << (d_enc * w + WINDOW * j) for j in range(rows)]
    request = hostile_request(probe_keypair, rows, d_enc, probe)

    def wire(out: Out):
        return decode(encode(message_of(out)))

    stream = ProductStreamHeader(request.session, pk, request.layout, d_enc, chunk_rows=rows)   # one chunk
    coordinator.handle(0, wire(Out(type="enc_request", body={"block": block.name, "to": "bob",
                                                             "wire": stream.to_wire()[0]},
                                   payload=[public_key_to_bytes(pk)])))
    B = np.random.default_rng(24).uniform(-1, 1, (rows, d_resp))
    response, share_b = ProductResponder(B, precision_bits=P, workers=1).respond(request)
    decrypted = [sk.raw_decrypt(int(c)) for c in response.ciphertexts]
    lay, n = request.layout, int(pk.n)
    declared = pack_slots(np.full((d_enc, d_resp), rows * lay.offset ** 2, dtype=object), lay, n)
    share_a = np.array([[(d + int(declared[k, 0])) % n] for k, d in enumerate(decrypted)], dtype=object)
    coordinator.handle(1, wire(Out(type="share", body={"block": block.name}, payload=[share_b])))
    with pytest.raises(ProtocolError, match="party alice's encrypted operand is not what its request declared, "
                                            "or party bob corrupted its share"):
        coordinator.handle(0, wire(Out(type="share", body={"block": block.name}, payload=[share_a])))
    assert block.name not in coordinator.values


# ----------------------------------------------------------------------------- (c) honest products stay exact
def _slots(keypair) -> int:
    holder = ProductEncryptor(keypair[1], np.zeros((30, 1)), response_cols=1, precision_bits=P)
    return holder.layout.slots_per_ciphertext


@pytest.mark.parametrize("n, d_a, d_b, encryptor", [(1, 1, 1, "a"), (17, 3, 2, "a"), (23, 2, 5, "b"),
                                                    (11, "3 groups", 2, "a"), (9, 2, "2 groups", "b"),
                                                    (30, 4, 9, "auto")])
def test_honest_products_with_both_noise_shares_are_exact(keypair, n, d_a, d_b, encryptor):
    """``combined = round(A 2^p)^T round(B 2^p) + noise^B + noise^A`` exactly, in every orientation and with several
    column groups (the packed layout is unpacked only where the shares are combined)."""
    from vfl.secure import run_secure_product, secure_gram
    from vfl.secure.encoding import inner_product_error_bound

    s = _slots(keypair)
    d_a = 2 * s + 1 if d_a == "3 groups" else d_a
    d_b = s + 2 if d_b == "2 groups" else d_b
    rng = np.random.default_rng(n * 100 + d_a)
    A, B = rng.uniform(-1, 1, (n, d_a)), rng.uniform(-1, 1, (n, d_b))
    e_b = discrete_gaussian_array(3.0, (d_a, d_b), rng, scale_bits=2 * P)
    e_a = discrete_gaussian_array(3.0, (d_a, d_b), rng, scale_bits=2 * P)
    seen: list[int] = []
    run = run_secure_product(A, B, keypair=keypair, allow_insecure=True, precision_bits=P, workers=1,
                             encryptor=encryptor, noise=e_b, key_holder_noise=e_a, on_decrypt=seen.append)
    exact = to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0))
    assert run.combined().tolist() == (exact + e_b + e_a).tolist()
    d_enc, d_resp = (d_a, d_b) if run.encryptor == "a" else (d_b, d_a)
    groups = run.layout.n_groups(d_enc)
    assert len(seen) == d_resp * groups and run.key_holder_share.shape == (d_resp, groups)
    assert all(0 <= int(v) < run.modulus for v in np.concatenate([run.key_holder_share.ravel(),
                                                                   run.responder_share.ravel()]))
    G = secure_gram(A, B, keypair=keypair, allow_insecure=True, precision_bits=P, workers=1, encryptor=encryptor)
    assert np.max(np.abs(G - A.T @ B)) <= inner_product_error_bound(n, P, 1.0)


@pytest.mark.parametrize("signs", [(1.0, 1.0, 1), (1.0, -1.0, -1)])
def test_extreme_honest_values_and_noise_at_its_bound_pass_the_range_check(keypair, signs):
    """The declared range holds every honest value: n rows of +-1 (|sum| = n O^2) with both noise shares at
    +-(N - 1) combine without a refusal."""
    from vfl.secure import run_secure_product

    sa, sb, sign = signs
    n = 40
    A, B = np.full((n, 2), sa), np.full((n, 3), sb)
    lay = ProductEncryptor(keypair[1], A, response_cols=3, precision_bits=P).layout
    edge = np.full((2, 3), sign * (lay.noise_offset - 1), dtype=object)
    run = run_secure_product(A, B, keypair=keypair, allow_insecure=True, precision_bits=P, workers=1, encryptor="a",
                             noise=edge, key_holder_noise=edge)
    exact = to_fixed_point_ints(A, P, 1.0).T.dot(to_fixed_point_ints(B, P, 1.0))
    assert run.combined().tolist() == (exact + 2 * edge).tolist()


def test_a_refusal_does_not_say_which_slot_failed():
    """The refusal reason travels to every party in the coordinator's ABORT, the encryptor included. An encryptor
    probing with a different threshold per slot (``lambda_j e_t``: slot j overflows iff ``|b_t| > 2^v / lambda_j``)
    would read from the first failing slot's position ~log2(slots) bits of a responder value instead of the one
    abort bit; so every failing position gives the same message. Fails while the message names the slot/column."""
    from vfl.secure.packing import SlotLayout
    from vfl.secure.products import centring_constant, combine_packed_shares

    lay = SlotLayout(key_bits=1024, n_rows=10, precision_bits=P, value_bound=1.0, noise_bits=2 * P + 32)
    n_cols, n_resp = 3, 2
    assert lay.n_groups(n_cols) == 1
    modulus = (1 << 1023) + 1   # any n above the packed width: the check reads bits, not the key
    C, w = centring_constant(lay), lay.slot_bits
    honest = sum(C << (w * j) for j in range(n_cols))
    reasons = set()
    for k in range(n_resp):
        for bad in [*range(n_cols), "above"]:
            Z = np.array([[honest] for _ in range(n_resp)], dtype=object)
            if bad == "above":
                Z[k, 0] += 1 << (w * n_cols)
            else:
                Z[k, 0] += (1 << lay.value_bits) << (w * bad)   # u = 2^v: just outside the declared range
            with pytest.raises(ProtocolError) as info:
                combine_packed_shares(Z % modulus, np.zeros_like(Z), layout=lay, n_cols=n_cols, modulus=modulus,
                                      encryptor="party alice")
            reasons.add(str(info.value))
    assert len(reasons) == 1 and "party alice" in reasons.pop()
