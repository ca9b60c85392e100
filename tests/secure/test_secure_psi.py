"""vfl.secure.psi: ID normalisation and the commutative P-256 blinding borrowed from openmined-psi."""

from __future__ import annotations

import hashlib

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


def test_reblind_validates_its_input():
    key = BlindingKey()
    good = key.blind(["a", "b"])
    with pytest.raises(ProtocolError, match="multiple"):
        key.reblind(good[:-1])
    with pytest.raises(ProtocolError, match="expected 3"):
        key.reblind(good, count=3)
    with pytest.raises(ProtocolError, match="compressed"):
        key.reblind(b"\x05" + good[1:])
    not_on_curve = next(bytes([2]) + i.to_bytes(32, "big") for i in range(1, 100)
                        if _not_a_point(key, bytes([2]) + i.to_bytes(32, "big")))
    with pytest.raises(ProtocolError, match="not a P-256 point"):
        key.reblind(not_on_curve)
    assert key.reblind(b"") == b""


def _not_a_point(key: BlindingKey, candidate: bytes) -> bool:
    try:
        key.reblind(candidate)
    except ProtocolError:
        return True
    return False


def test_chunked_library_calls_give_the_same_points(monkeypatch):
    import vfl.secure.psi as psi_module

    key = BlindingKey()
    ids = [f"r{i}" for i in range(40)]
    whole, again = key.blind(ids), key.reblind(key.blind(ids))
    monkeypatch.setattr(psi_module, "CHUNK", 7)
    assert key.blind(ids) == whole and key.reblind(whole) == again
