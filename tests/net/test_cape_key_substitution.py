"""A hostile CAPE aggregator substitutes Diffie-Hellman values, against real `vfl site` (capeFM) and
`vfl djica-site` (capePCA + capeDJICA) processes with real Ed25519 identities, at the socket level
(:class:`fake_coordinator.FakeCoordinator` as the aggregator).

The attack: the aggregator puts its own value in place of site1's in the table it sends site0. Unauthenticated,
site0 masks its noise share under a pair key the aggregator knows, so the aggregator unmasks e^_0 and, after the
release, sees site0's statistic under the small independent noise g_0 alone (socket-free proof:
tests/protocols/test_cape_keys.py::test_without_the_check_the_substitution_unmasks_the_share). Now each value is
signed by its site's pinned identity over (run, plan, round, index, name, value) (vfl.protocols.cape_keys): site0
exits 4 with one line naming site1 and sends no CAPE_MASKED, while site1, sent the honest table in the same run,
masks as usual (the fake observes masked messages when they are sent).
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from helpers.cape_identities import site_identities
from helpers.fake_coordinator import FakeCoordinator

from vfl.exceptions import IdentityError, PrivacyLeakWarning, ProtocolError
from vfl.models.cape_ica import CapeICAConfig
from vfl.net.cape_aggregator import CapeAggregator, CapeSettings
from vfl.net.messages import Message, MessageType
from vfl.net.site import SiteData, SiteNode
from vfl.protocols.cape_aggregation import CapeFMAggregator
from vfl.protocols.cape_djica_rounds import CapeICAPlan
from vfl.secure.aggregation import SecAggSite

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]   # outer limit; the runs end far sooner

VFL = [sys.executable, "-m", "vfl.cli"]
N_ROWS = (40, 50)
GENEROUS = 120
#: what a site may send before it has checked the key table: nothing derived from its data or its noise
BEFORE_KEYS = {MessageType.REGISTER, MessageType.CAPE_KEY, MessageType.ERROR, MessageType.HEARTBEAT}


def _tables(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in N_ROWS:
        X = rng.uniform(-1, 1, (n, 2))
        out.append((X, np.clip(X @ [0.5, -0.3] + rng.normal(0, 0.1, n), -2, 2)))
    return out


def _start_site(fake: FakeCoordinator, tmp, role: str, i: int, ids: str) -> subprocess.Popen:  # noqa: ANN001
    """A real `vfl site` (capeFM: rows a, b, label y) or `vfl djica-site` (capeDJICA: time points of D = 3)."""
    X, y = _tables()[i]
    path = tmp / f"site{i}.csv"
    if role == "site":
        rows = [f"{float(r[0])!r},{float(r[1])!r},{float(t)!r}\n" for r, t in zip(X, y, strict=True)]
        path.write_text("a,b,y\n" + "".join(rows))
        (tmp / "bounds.toml").write_text("[bounds]\na = [-1, 1]\nb = [-1, 1]\ny = [-2, 2]\n")
        extra = ["--features", "a,b", "--label", "y", "--bounds", str(tmp / "bounds.toml")]
    else:
        T = np.column_stack([X, y / 2]) / 2   # every time point in the unit ball
        path.write_text("d0,d1,d2\n" + "".join(",".join(repr(float(v)) for v in r) + "\n" for r in T))
        extra = []
    return subprocess.Popen([*VFL, role, "--connect", fake.endpoint, "--name", f"site{i}", "--data", str(path),
                             *extra, "--timeout", str(GENEROUS), "--identity-dir", ids],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _plan(role: str) -> tuple[dict, dict, int]:
    """An ordinary plan of ``role``'s run: (plan body, extra CAPE_PLAN fields, round id of the first CAPE round)."""
    if role == "site":
        fm = CapeFMAggregator.new_plan("linear", 1.0, 1e-5, list(N_ROWS), 3)
        return fm.to_body(), {"fit_intercept": True}, fm.round_id
    ica = CapeICAPlan.new(CapeICAConfig(2, 1.0, 1e-5, max_iter=5), list(N_ROWS), 3)
    return ica.to_body(), {}, ica.round_id


def _plan_and_keys(fake: FakeCoordinator, role: str) -> tuple[dict[str, bytes], int, dict[str, Message]]:
    """Register both sites, send them an ordinary plan naming them; their signed CAPE_KEY messages."""
    peers: dict[str, bytes] = {}
    for _ in N_ROWS:
        peer, body = fake.register(timeout=GENEROUS)
        peers[body["name"]] = peer
    names = sorted(peers)
    plan, extra, round_id = _plan(role)
    for i, name in enumerate(names):
        fake.send(peers[name], MessageType.CAPE_PLAN, {"index": i, "plan": plan, "sites": names, **extra})
    keys: dict[str, Message] = {}
    while len(keys) < len(names):
        got = fake.wait_for(MessageType.CAPE_KEY, MessageType.ERROR, timeout=GENEROUS)
        assert got is not None and got[1].type is MessageType.CAPE_KEY, got
        keys[got[1].sender] = got[1]
    return peers, round_id, keys


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture()
def fake():
    f = FakeCoordinator()
    yield f
    f.close()


@pytest.mark.parametrize("role", ["site", "djica-site"])
def test_a_substituted_key_stops_the_real_site_before_its_masked_share(fake, tmp_path, role):
    ids = site_identities(tmp_path, ("site0", "site1"))
    procs = [_start_site(fake, tmp_path, role, i, ids) for i in range(2)]
    try:
        peers, round_id, keys = _plan_and_keys(fake, role)
        honest = np.stack([np.asarray(keys[n].array(0), dtype=np.uint8) for n in ("site0", "site1")])
        auths = [keys[n].body["auth"] for n in ("site0", "site1")]
        assert all(isinstance(a, str) and len(a) == 128 for a in auths)   # both sites signed their values
        forged = honest.copy()
        forged[1] = np.frombuffer(SecAggSite(1, 2, 1).public_key().to_bytes(256, "big"), dtype=np.uint8)
        fake.send(peers["site0"], MessageType.CAPE_KEYS, {"round": round_id, "auths": auths}, [forged])
        fake.send(peers["site1"], MessageType.CAPE_KEYS, {"round": round_id, "auths": auths}, [honest])
        seen: set[tuple[str, MessageType]] = set()
        while not {("site1", MessageType.CAPE_MASKED), ("site0", MessageType.ERROR)} <= seen:
            got = fake.wait_for(MessageType.CAPE_MASKED, MessageType.ERROR, timeout=GENEROUS)
            assert got is not None, seen   # the control: site1, sent the honest table, does mask
            assert (got[1].sender, got[1].type) != ("site0", MessageType.CAPE_MASKED), \
                "site0 masked its noise share under the aggregator's substituted value"
            seen.add((got[1].sender, got[1].type))
        _, err = procs[0].communicate(timeout=GENEROUS)
        line = _one_line(err)
        assert procs[0].returncode == 4, err
        assert "bad signature on the Diffie-Hellman value of site 1" in line and "'site1'" in line, line
        sent0 = {m.type for _, m in fake.received if m.sender == "site0"}
        assert sent0 <= BEFORE_KEYS, sent0   # no CAPE_MASKED, no CAPE_RELEASE from the attacked site
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def test_a_site_without_identity_does_not_even_register(tmp_path):
    """`vfl site` without --identity-dir and without --insecure-no-identity: exit 2, one line, before its data."""
    out = subprocess.run([*VFL, "site", "--connect", "tcp://127.0.0.1:1", "--name", "site0", "--data",
                          str(tmp_path / "absent.csv"), "--features", "a", "--label", "y", "--bounds",
                          str(tmp_path / "absent.toml")], capture_output=True, text=True, timeout=GENEROUS)
    line = _one_line(out.stderr)
    assert out.returncode == 2 and "site site0 has no signing identity" in line and "--identity-dir" in line, line


def _threaded(tmp_path, insecure: tuple[bool, bool]) -> tuple[object, dict[str, object]]:
    """A real aggregator and two SiteNode threads; site i runs with --insecure-no-identity if insecure[i]."""
    ids = site_identities(tmp_path, ("site0", "site1"))
    agg = CapeAggregator(CapeSettings(2, epsilon=5.0, timeout=GENEROUS), "tcp://127.0.0.1:0")
    nodes = []
    for i, (X, y) in enumerate(_tables()):
        data = SiteData.build(f"site{i}", X, y, feature_names=["a", "b"], bounds=(-1, 1), label_bounds=(-2, 2))
        if insecure[i]:
            with pytest.warns(PrivacyLeakWarning, match="runs WITHOUT identities"):
                nodes.append(SiteNode(data, agg.endpoint, timeout=GENEROUS, insecure_no_identity=True))
        else:
            nodes.append(SiteNode(data, agg.endpoint, timeout=GENEROUS, identity_dir=ids))
    outcomes: dict[str, object] = {}

    def member(node: SiteNode) -> None:
        try:
            outcomes[node.data.name] = node.run()
        except Exception as exc:  # noqa: BLE001 - asserted by the test
            outcomes[node.data.name] = exc

    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    try:
        result: object = agg.run()
    except Exception as exc:  # noqa: BLE001
        result = exc
    for t in threads:
        t.join(timeout=GENEROUS)
    return result, outcomes


def test_a_signed_site_refuses_a_co_site_without_identity(tmp_path):
    result, sites = _threaded(tmp_path, (False, True))
    assert isinstance(sites["site0"], IdentityError) and "from 'site1' carries no valid signature" in str(
        sites["site0"]), sites
    assert isinstance(result, Exception)


def test_a_run_without_identities_is_recorded_in_the_report(tmp_path):
    result, sites = _threaded(tmp_path, (True, True))
    assert not isinstance(result, Exception), result
    report = result.privacy_report  # type: ignore[attr-defined]
    assert report["unsigned_sites"] == ["site0", "site1"]
    assert any("identities NOT checked: site0, site1 ran with --insecure-no-identity" in n for n in report["notes"])
    assert not any(isinstance(v, ProtocolError) for v in sites.values())
