"""The `vfl` command in-process: help texts, one-line errors with exit codes, keys, config and bounds files."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.aligned_rows import rows_aligned
from helpers.signed_model import signed

from vfl.cli import cli, main
from vfl.data.config import load_bounds_file, load_party_config, read_party_csv, select_columns
from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.models.modelio import FittedModel, PartyColumns, load_model


def _run(capsys, *argv):
    code = main(rows_aligned(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_option_has_help():
    for name, command in cli.commands.items():
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"vfl {name} {param.opts} has no help text"


@pytest.mark.parametrize("argv, code, text", [
    (["coordinator"], 2, "Missing option '--parties'"),
    (["coordinator", "--parties", "2", "--mechanism", "magic"], 2, "'magic' is not one of"),
    (["coordinator", "--parties", "2", "--key-bits", "1024"], 2, "insecure"),
    (["coordinator", "--parties", "2", "--mechanism", "gaussian-fm"], 2, "needs --epsilon"),
    (["party", "--name", "a"], 2, "missing --connect"),
    (["party", "--config", "/nonexistent.toml"], 2, "not found"),
    (["predict", "--model", "/nonexistent.json", "--data", "x.csv"], 2, "not found"),
    (["nonsense"], 2, "No such command"),
    # checked before binding, i.e. before any party has registered (they used to fail only after registration)
    (["coordinator", "--parties", "2", "--epsilon", "inf"], 1, "finite"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--calibration", "classical"], 1, "epsilon < 1"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--mechanism", "laplace-fm", "--calibration", "paper"], 2,
     "do not apply to mechanism laplace-fm"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--precision-bits", "0"], 2, "--precision-bits"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--budget-split", "most"], 2, "--budget-split"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--budget-split", "1.5"], 2, "budget_split"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--mechanism", "laplace-fm", "--budget-split", "0.8"], 2,
     "do not apply to mechanism laplace-fm"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--max-message-bytes", "-5"], 2, "--max-message-bytes"),
    # capeFM (`--sites`): the same range check as the vertical coordinator, before binding
    (["coordinator", "--sites", "2", "--mechanism", "cape-fm", "--epsilon", "1", "--max-message-bytes", "-1"], 2,
     "--max-message-bytes must lie in [65536, 268435456], got -1"),
    (["coordinator", "--sites", "2", "--mechanism", "cape-fm", "--epsilon", "1", "--max-message-bytes",
      str(2**40)], 2, "--max-message-bytes must lie in [65536, 268435456]"),
    (["coordinator", "--parties", "2", "--epsilon", "1", "--max-run-time", "0"], 2, "max run time"),
    (["coordinator", "--parties", "2", "--mechanism", "dp-bcd", "--epsilon", "1", "--rounds", "0"], 2, "--rounds"),
    (["coordinator", "--parties", "2", "--mechanism", "dp-bcd", "--epsilon", "1", "--gamma", "0.5"], 2, "--gamma"),
    (["coordinator", "--parties", "2", "--mechanism", "bcd", "--tol", "-1"], 2, "--tol"),
])
def test_user_errors_are_one_line(capsys, argv, code, text):
    rc, out, err = _run(capsys, *argv)
    assert rc == code
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vfl: error:") and text in lines[0], err
    assert "Traceback" not in err


def test_help_exits_zero(capsys):
    rc, out, _ = _run(capsys, "party", "--help")
    assert rc == 0 and "--features" in out and "--bounds" in out
    assert "--identity-dir" in out and "--insecure-no-identity" in out and "--max-exposed-rows" not in out


def test_keys_command(tmp_path, capsys):
    rc, out, _ = _run(capsys, "keys", "--out", str(tmp_path), "--names", "alice,bob", "--names", "carol")
    assert rc == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([f"{n}.{e}" for n in ["coordinator", "alice", "bob", "carol"] for e in ["key", "key_secret"]]
                           + [f"{n}.sign.{e}" for n in ["alice", "bob", "carol"] for e in ["pub", "secret"]])
    assert (tmp_path / "alice.key_secret").stat().st_mode & 0o077 == 0
    assert (tmp_path / "alice.sign.secret").stat().st_mode & 0o077 == 0
    from vfl.secure.identity import load_party_identity
    identity, pinned = load_party_identity(tmp_path, "bob")   # what `vfl party --identity-dir` loads
    assert identity.name == "bob" and pinned.names == ["alice", "bob", "carol"]
    rc, _, err = _run(capsys, "keys", "--out", str(tmp_path), "--names", "alice")
    assert rc == 2 and "refusing to overwrite" in err


def test_party_without_identity_refuses_to_start_unless_opted_in(tmp_path, capsys):
    """Issue 20: without pinned identities a signed roster proves nothing, so a party does not start without
    --identity-dir (one line, exit 2, before reading its data); --insecure-no-identity is the loud opt-in."""
    data = tmp_path / "a.csv"
    data.write_text("age,score\n30,5\n40,6\n")
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("[bounds]\nage = [0, 120]\n")
    base = ["party", "--connect", "tcp://127.0.0.1:1", "--name", "a", "--data", str(data), "--features", "age",
            "--bounds", str(bounds), "--no-progress", "--timeout", "0.5"]
    rc, _, err = _run(capsys, *base)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "party a has no signing identity: pass --identity-dir" in lines[0], err
    assert "--insecure-no-identity" in lines[0]
    rc, _, err = _run(capsys, *base, "--identity-dir", str(tmp_path / "none"))
    assert rc == 2 and "signing key" in err and "not found" in err
    rc, _, err = _run(capsys, *base, "--insecure-no-identity")   # starts, warns, then finds no coordinator
    assert rc == 3 and "runs WITHOUT identities (--insecure-no-identity)" in err and "loopback experiments only" in err


def test_select_columns():
    header = ["a", "b", "c", "d", "e"]
    assert select_columns("a,c", header) == ["a", "c"]
    assert select_columns("b:d", header) == ["b", "c", "d"]
    assert select_columns("0-1,4", header) == ["a", "b", "e"]
    with pytest.raises(DataValidationError, match="unknown feature"):
        select_columns("a,zz", header)
    with pytest.raises(DataValidationError, match="twice"):
        select_columns("a,a:b", header)


def test_csv_reader_and_row_ids(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("id,x,y\nu1,1.5,0\nu2,2.5,1\n")
    t = read_party_csv(f, "x", label="y", id_column="id")
    np.testing.assert_array_equal(t.X, [[1.5], [2.5]])
    np.testing.assert_array_equal(t.y, [0, 1])
    g = tmp_path / "g.csv"
    g.write_text("id,z\nu2,1\nu1,2\n")
    assert t.ids == ["u1", "u2"] and read_party_csv(g, "z", id_column="id").ids == ["u2", "u1"]
    assert read_party_csv(g, "z").ids is None
    f.write_text("id,x,y\nu1,abc,0\n")
    with pytest.raises(DataValidationError, match="'abc' is not a number"):
        read_party_csv(f, "x", label="y")


def test_party_config_and_bounds_files(tmp_path):
    cfg = tmp_path / "p.toml"
    cfg.write_text('[party]\nname = "a"\nconnect = "tcp://127.0.0.1:1"\ndata = "d.csv"\nfeatures = ["x"]\n'
                   'bounds = "b.toml"\n')
    c = load_party_config(cfg)
    assert c.name == "a" and c.data == str(tmp_path / "d.csv") and c.bounds == str(tmp_path / "b.toml")
    cfg.write_text('[party]\nname = "a"\nfeaturez = ["x"]\n')
    with pytest.raises(ConfigurationError, match="featurez"):
        load_party_config(cfg)
    b = tmp_path / "b.toml"
    b.write_text("[bounds]\nx = [0, 10]\ny = [-1.5, 2]\n")
    assert load_bounds_file(b) == {"x": (0.0, 10.0), "y": (-1.5, 2.0)}
    b.write_text("[bounds]\nx = [10, 0]\n")
    with pytest.raises(ConfigurationError, match="lo < hi"):
        load_bounds_file(b)


def test_shipped_party_configs_parse():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "parties"
    configs = sorted(root.glob("*/*.toml"))
    assert configs
    for path in configs:
        cfg = load_party_config(path)
        assert cfg.name and cfg.connect and cfg.features and (cfg.dataset or cfg.data)


def test_model_json_round_trip_and_predict(tmp_path, capsys, identity_dir):
    parties = [PartyColumns("a", ["x1", "x2"], [[0, 10], [-1, 1]], 0.5, True), PartyColumns("b", ["x3"], [[0, 2]])]
    m = FittedModel("linear", "none", parties, np.array([0.2, -0.4, 0.6]), [0.0, 100.0], {"mechanism": "none"}, 3)
    X = np.array([[5.0, 0.0, 1.0], [10.0, 1.0, 2.0], [0.0, -1.0, 0.0]])
    unit = np.column_stack([(X[:, 0] / 5 - 1) * 0.5, X[:, 1] * 0.5, X[:, 2] - 1])
    expected = ((unit @ m.w) + 1) / 2 * 100
    np.testing.assert_allclose(m.predict(X), expected)
    np.testing.assert_allclose(m.predict([X[:, :2], X[:, 2:]]), expected)
    path = tmp_path / "model.json"
    signed(m, identity_dir).to_json(path)   # as its parties sign it at the end of a run (issue 29)
    m2 = load_model(path)
    np.testing.assert_allclose(m2.coef_, m.coef_)
    data = tmp_path / "data.csv"
    data.write_text("x3,x2,x1,other\n" + "".join(f"{r[2]},{r[1]},{r[0]},7\n" for r in X))
    rc, out, err = _run(capsys, "predict", "--model", str(path), "--data", str(data))
    assert rc == 0, err
    np.testing.assert_allclose([float(v) for v in out.split()[1:]], expected, rtol=1e-8)


@pytest.mark.parametrize("extra, code, text", [
    (["--name", "a b", "--features", "age"], 2, "invalid party name"),  # was exit code 4 (protocol error)
    (["--name", "a", "--features", "age,score", "--label", "score"], 2, "label column 'score' is also selected"),
    (["--name", "a", "--features", "id,age", "--id", "id"], 2, "row-ID column 'id' is also selected"),
    (["--name", "a", "--features", "age,nope"], 2, "unknown feature(s) 'nope'"),
    (["--name", "a", "--features", "age", "--label", "nope"], 2, "unknown label column 'nope'"),
    (["--name", "a", "--features", "age", "--bounds", "/nonexistent.toml"], 2, "not found"),
    (["--name", "a", "--features", "bad"], 2, "is not a number"),
    (["--name", "a", "--features", "hole"], 2, "is not finite"),
    (["--name", "a", "--features", "age", "--bounds", "tight"], 2, "outside its declared bounds"),
])
def test_party_user_errors_before_connecting(tmp_path, capsys, identity_dir, extra, code, text):
    """Every one fails before the party connects (the endpoint has no listener), with one line and code 2."""
    data = tmp_path / "a.csv"
    data.write_text("id,age,bad,hole,score\nr1,30,1,nan,5\nr2,40,x,2,6\n")
    (tmp_path / "tight.toml").write_text("[bounds]\nage = [0, 35]\n")
    extra = [str(tmp_path / "tight.toml") if e == "tight" else e for e in extra]
    rc, _, err = _run(capsys, "party", "--connect", "tcp://127.0.0.1:1", "--data", str(data), "--no-progress",
                      "--identity-dir", str(identity_dir), *extra)
    assert rc == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vfl: error:") and text in lines[0], err


def test_demo_stops_the_other_processes_as_soon_as_one_fails():
    """Regression: `vfl demo` waited for each process in turn, so a coordinator that died at start-up left the
    demo hanging until the parties' own timeouts (120 s by default)."""
    import subprocess
    import sys
    import time

    from vfl.demo import wait_all

    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    failing = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    t0 = time.monotonic()
    codes = wait_all([failing, *sleepers], timeout=60)
    assert time.monotonic() - t0 < 20
    assert codes[0] == 3 and all(c != 0 for c in codes[1:])
    assert all(p.poll() is not None for p in sleepers)
    ok = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(2)]
    assert wait_all(ok, timeout=60) == [0, 0]


@pytest.mark.parametrize("model_text, data_text, text", [
    (None, "x3,x2,other\n1,0,7\n", "unknown feature(s) 'x1'"),
    ("{not json", "x3,x2,x1\n1,0,7\n", "is not valid JSON"),
    ('{"model": "linear"}', "x3,x2,x1\n1,0,7\n", "not a vfl-model model file"),
    ("[1, 2]", "x3,x2,x1\n1,0,7\n", "not a vfl-model model file"),
    (None, "x3,x2,x1\n1,nan,7\n", "'nan' is not finite"),
    (None, "x3,x2,x1\n1,abc,7\n", "'abc' is not a number"),
])
def test_predict_user_errors_are_one_line_and_print_nothing(tmp_path, capsys, identity_dir, model_text, data_text,
                                                            text):
    """`vfl predict` with a wrong data file or a broken model file: exit 2, one line, no predictions printed."""
    path = tmp_path / "model.json"
    if model_text is None:
        parties = [PartyColumns("a", ["x1", "x2"], [[0, 10], [-1, 1]], 0.5, True), PartyColumns("b", ["x3"], [[0, 2]])]
        signed(FittedModel("linear", "none", parties, np.array([0.2, -0.4, 0.6]), [0.0, 100.0],
                           {"mechanism": "none"}, 3), identity_dir).to_json(path)
    else:
        path.write_text(model_text)
    data = tmp_path / "data.csv"
    data.write_text(data_text)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, out, err = _run(capsys, "predict", "--model", str(path), "--data", str(data))
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vfl: error:") and text in lines[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
