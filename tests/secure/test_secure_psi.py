"""vfl.secure.psi: ID normalisation and the commutative X25519 blinding composed from libsodium (PyNaCl)."""

from __future__ import annotations

import hashlib
import secrets

import pytest

from vfl.exceptions import DataValidationError, ProtocolError
from vfl.secure.psi import POINT_BYTES, BlindingKey, normalise_id, normalise_ids, self_test, split_points


def test_normalisation_is_nfc_stripped_and_case_sensitive():
    assert normalise_id("caf\u00e9") == normalise_id("cafe\u0301")       # NFC: one person, two spellings
    assert normalise_id("  ab 12\t\n") == "ab 12"                        # outer whitespace only
    assert normalise_id("\u3000x\u00a0") == "x"                          # Unicode spaces too
    assert normalise_id("AB12") != normalise_id("ab12")                  # case-sensitive
    assert normalise_id(17) == "17"


@pytest.mark.parametrize("bad", [None, float("nan"), "", "   ", "\t"])
def test_missing_or_empty_ids_are_refused(bad):
    with pytest.raises(DataValidationError, match="row ID"):
        normalise_id(bad)
    with pytest.raises(DataValidationError, match="data row 2"):
        normalise_ids(["a", bad, "c"])


def test_duplicates_after_normalisation_are_refused_without_quoting_the_id():
    with pytest.raises(DataValidationError) as info:
        normalise_ids(["secret-1", "x", " secret-1 "])
    msg = str(info.value)
    assert "duplicate" in msg and "rows 1 and 3" in msg and "secret" not in msg
    with pytest.raises(DataValidationError, match="no rows"):
        normalise_ids([])


def test_blinding_commutes_keeps_order_and_depends_on_the_key():
    ids = [f"person-{i}" for i in range(50)]
    a, b = BlindingKey(), BlindingKey()
    ab, ba = b.reblind(a.blind(ids)), a.reblind(b.blind(ids))
    assert ab == ba and len(ab) == 50 * POINT_BYTES
    # order kept: blinding one by one gives the same points in the same places
    assert a.blind(ids) == b"".join(a.blind([x]) for x in ids)
    assert a.blind(ids) != b.blind(ids)
    assert len(set(split_points(a.blind(ids)))) == 50
    # a reversed list stays reversed after re-blinding
    rev = b.reblind(b"".join(reversed(split_points(a.blind(ids)))))
    assert split_points(rev) == list(reversed(split_points(ab)))
    self_test()


def test_blinded_points_contain_no_id_and_no_plain_hash():
    ids = [f"id-{i}" for i in range(100)]
    blob = BlindingKey().blind(ids)
    for x in ids:
        raw = x.encode()
        for h in (hashlib.sha256, hashlib.md5, hashlib.sha1):
            assert h(raw).digest()[:8] not in blob
        assert raw not in blob


P = 2**255 - 19
#: the u-coordinates of Curve25519's points of order 1, 2, 4 and 8 (RFC 7748; libsodium's blocklist)
LOW_ORDER = [0, 1, P - 1, 325606250916557431795983626356110631294008115727848805560023387167927233504,
             39382357235489614581723060781553021112529911719440698176882885853963445705823]


def _u(value: int) -> bytes:
    return value.to_bytes(32, "little")


def test_reblind_validates_its_input():
    key = BlindingKey()
    good = key.blind(["a", "b"])
    with pytest.raises(ProtocolError, match="multiple"):
        key.reblind(good[:-1])
    with pytest.raises(ProtocolError, match="expected 3"):
        key.reblind(good, count=3)
    assert key.reblind(b"") == b""


@pytest.mark.parametrize("u", LOW_ORDER)
def test_points_of_small_order_are_refused(u):
    """A hostile sender's low-order point would come back as the neutral element whatever the key: refused
    (libsodium's all-zero check), with nothing of the list returned."""
    key = BlindingKey()
    good = key.blind(["a", "b"])
    on_curve = pow((u**3 + 486662 * u**2 + u) % P, (P - 1) // 2, P) != P - 1   # u = p - 1 lies on the twist
    reason = "small order" if on_curve else "twist"
    with pytest.raises(ProtocolError, match=reason):
        key.reblind(good + _u(u))
    with pytest.raises(ProtocolError, match=reason):
        key.reblind(_u(u) + good)


@pytest.mark.parametrize("value", [P, P + 1, 2**255 - 1, 2**255 + 9, 2**256 - 1])
def test_non_canonical_encodings_are_refused(value):
    """u >= p (or bit 255 set) would be reduced silently by X25519: two encodings of one point are refused."""
    key = BlindingKey()
    good = key.blind(["a"])
    bad = (value % 2**256).to_bytes(32, "little")
    with pytest.raises(ProtocolError, match="non-canonical"):
        key.reblind(good + bad)
    with pytest.raises(ProtocolError, match="non-canonical"):
        split_points(bad)
    # the largest canonical value is not refused for its encoding (p - 1 is of small order: refused for that)
    assert split_points(_u(P - 2)) == [_u(P - 2)]


def test_twist_points_are_refused():
    """u-coordinates of the quadratic twist are refused before any scalar multiplication."""
    key = BlindingKey()
    twist = next(_u(u) for u in range(2, 200) if pow((u**3 + 486662 * u**2 + u) % P, (P - 1) // 2, P) == P - 1)
    with pytest.raises(ProtocolError, match="twist"):
        key.reblind(key.blind(["a"]) + twist)


def test_the_hash_is_libsodiums_elligator_map_and_its_own_conversion():
    """H(x) = u-coordinate of crypto_core_ed25519_from_uniform(SHA-512(DOMAIN || x)[:32]), as libsodium's
    crypto_sign_ed25519_pk_to_curve25519 converts it (which also checks the prime-order subgroup)."""
    import nacl.bindings as nb

    from vfl.secure.psi import DOMAIN, hash_to_group

    for x in ["a", "caf\u00e9", "x" * 4096]:
        edwards = nb.crypto_core_ed25519_from_uniform(hashlib.sha512(DOMAIN + x.encode()).digest()[:32])
        assert nb.crypto_core_ed25519_is_valid_point(edwards)   # in the prime-order subgroup, not small order
        assert hash_to_group(x) == nb.crypto_sign_ed25519_pk_to_curve25519(edwards)


def test_exact_intersection_equals_the_set_intersection():
    import secrets

    shared = [secrets.token_hex(6) for _ in range(300)]
    xs = shared + [secrets.token_hex(6) for _ in range(700)]
    ys = [secrets.token_hex(6) for _ in range(500)] + shared[:200]
    a, b = BlindingKey(), BlindingKey()
    fa = split_points(b.reblind(a.blind(xs)))
    fb = set(split_points(a.reblind(b.blind(ys))))
    assert {x for x, p in zip(xs, fa, strict=True) if p in fb} == set(xs) & set(ys)


def test_chunked_and_threaded_calls_give_the_same_points(monkeypatch):
    import vfl.secure.psi as psi_module

    key = BlindingKey(workers=1)
    ids = [f"r{i}" for i in range(40)]
    whole, again = key.blind(ids), key.reblind(key.blind(ids))
    monkeypatch.setattr(psi_module, "CHUNK", 7)
    for workers in (1, 2, 3):
        threaded = BlindingKey(key._key, workers=workers)
        assert threaded.blind(ids) == whole and threaded.reblind(whole) == again
    bad = whole[:20 * POINT_BYTES] + _u(0) + whole[21 * POINT_BYTES:]
    with pytest.raises(ProtocolError, match="small order"):
        BlindingKey(workers=3).reblind(bad)


def test_keys_are_checked():
    with pytest.raises(ValueError, match="32 bytes"):
        BlindingKey(b"short")
    with pytest.raises(ValueError, match="workers"):
        BlindingKey(workers=0)


def test_another_thread_runs_while_a_long_list_is_blinded(monkeypatch):
    """A party's heartbeat thread must keep running during blinding: libsodium's calls release the GIL, so even one
    task holding the whole list (CHUNK raised above its length) leaves the GIL to other threads between and during
    its calls. With the GIL held for the whole call (the P-256 library's behaviour per call), the ticker's largest
    gap would be the whole blinding time; it must be a small part of it."""
    import threading
    import time

    import vfl.secure.psi as psi_module

    monkeypatch.setattr(psi_module, "CHUNK", 10**9)
    ticks: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    thread = threading.Thread(target=ticker, daemon=True)
    ids = [f"id-{i}" for i in range(5_000)]
    thread.start()
    start = time.monotonic()
    BlindingKey(workers=1).blind(ids)
    end = time.monotonic()
    stop.set()
    thread.join(10)
    during = [t for t in ticks if start <= t <= end]
    gaps = [b - a for a, b in zip([start, *during], [*during, end], strict=True)]
    assert len(during) >= 3 and max(gaps) < (end - start) / 2, (max(gaps), end - start)


@pytest.mark.parametrize("y, what", [(1, "neutral"), (2**255 - 19 + 2, "non-canonical"), (2**255 - 1, "non-canonical")])
def test_the_u_map_refuses_the_neutral_element_and_non_canonical_y(y, what):
    """``u = (1 + y) / (1 - y)`` is undefined at the neutral element ``y = 1`` (it would divide by zero) and a
    non-canonical ``y >= p`` would be reduced silently (a second encoding of a point): ``montgomery_u`` refuses both
    with a ValueError naming the case instead of a ZeroDivisionError or a silently reduced u."""
    from vfl.secure.psi import montgomery_u

    with pytest.raises(ValueError, match=what):
        montgomery_u(y.to_bytes(32, "little"))
    # canonical y of a subgroup point: libsodium's own conversion agrees
    import nacl.bindings as nb

    e = nb.crypto_core_ed25519_from_uniform(bytes(range(32)))
    assert montgomery_u(e) == nb.crypto_sign_ed25519_pk_to_curve25519(e)


def test_a_small_order_component_is_annihilated_by_the_clamped_scalar():
    """docs/psi.md "Hostile points" (i): a point of the prime-order subgroup plus a point of order 4 or 8 is a
    different, valid curve point (it passes every check), but ``8 | c(k)`` so it re-blinds to exactly what the clean
    point does: a hostile sender learns nothing about ``k mod 8`` from such a point."""
    import nacl.bindings as nb

    from vfl.secure.psi import montgomery_u

    key = BlindingKey(workers=1)
    clean = nb.crypto_core_ed25519_from_uniform(bytes(range(1, 33)))
    order4 = bytes(32)   # y = 0, x = sqrt(-1): a point of order 4
    # a point of order 8 (libsodium's small-order blocklist, ed25519_ref10.c)
    order8 = bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")
    assert _is_small_order_edwards(order4, 4) and _is_small_order_edwards(order8, 8)
    for torsion in (order4, order8):
        mixed = nb.crypto_core_ed25519_add(clean, torsion)
        u_clean, u_mixed = montgomery_u(clean), montgomery_u(mixed)
        assert u_mixed != u_clean
        assert key.reblind(u_mixed) == key.reblind(u_clean)


def _is_small_order_edwards(e: bytes, order: int) -> bool:
    """``e`` decodes to an edwards25519 point of exactly this order (by repeated addition with libsodium)."""
    import nacl.bindings as nb

    try:
        acc = e
        for i in range(1, order + 1):
            if acc == (1).to_bytes(32, "little"):
                return i == order
            acc = nb.crypto_core_ed25519_add(acc, e)
    except Exception:
        return False
    return False


def test_hashing_straight_to_a_u_coordinate_would_leak_curve_or_twist_through_every_blinded_point():
    """Why vfl hashes into the prime-order subgroup (docs/psi.md, "Against SecretFlow SPU's PSI"): with ``H(x) =
    SHA-256(x)`` read as an X25519 u-coordinate (SPU's default ECDH-PSI on Curve25519), about half of all IDs land on
    the quadratic twist, and X25519 keeps a point on its curve or twist, so anyone who sees ``[k] H(x)`` learns
    whether ``H(x)`` was on the twist: one bit of every ID, whatever ``k``. vfl's blinded points are all on the curve.
    """
    from nacl.bindings import crypto_scalarmult

    from vfl.secure.psi import _on_curve

    def sha_u(x: str) -> bytes:
        digest = bytearray(hashlib.sha256(x.encode()).digest())
        digest[31] &= 0x7F
        return bytes(digest)

    ids = [f"person-{i}" for i in range(400)]
    k = secrets.token_bytes(32)
    on_curve = [_on_curve(sha_u(x)) for x in ids]
    blinded = [crypto_scalarmult(k, sha_u(x)) for x in ids]
    # the bit survives blinding for every ID ...
    assert [_on_curve(b) for b in blinded] == on_curve
    # ... and splits the IDs about in half (Binomial(400, 1/2): 200 +- 10; 5 standard deviations either side)
    assert 150 <= sum(on_curve) <= 250
    # so an observer who knows a party holds x0 or x1 (one on the curve, one on the twist) tells which from the
    # blinded point alone; vfl's hash puts every ID on the curve, so its blinded points carry no such bit
    x0 = next(x for x, c in zip(ids, on_curve, strict=True) if c)
    x1 = next(x for x, c in zip(ids, on_curve, strict=True) if not c)
    for held in (x0, x1):
        seen = crypto_scalarmult(secrets.token_bytes(32), sha_u(held))
        assert (x0 if _on_curve(seen) else x1) == held
    assert all(_on_curve(p) for p in split_points(BlindingKey(k).blind(ids)))
