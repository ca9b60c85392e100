"""The user's path through data files and model files (issue 21 items 1, 10, 11), in process:

* `vfl party --config` honours an inline ``[bounds]`` table with the checks of a ``--bounds`` file, and refuses a
  second definition;
* declared preprocessing (``[categories]``, ``[impute]``) is applied before the bounds check, and its errors are
  one line each;
* `vfl predict` passes an ID column through, names its output column, applies the model's recorded preprocessing to
  raw rows, and refuses, flags or clips rows outside the model's public bounds -- exit 2 and no file on refusal.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from helpers.aligned_rows import rows_aligned
from helpers.signed_model import signed

from vfl.cli import main
from vfl.models.modelio import FittedModel, PartyColumns

NOWHERE = "tcp://127.0.0.1:1"   # nothing listens: every check below must fail before connecting


def _run(capsys, *argv):
    code = main(rows_aligned([str(a) for a in argv]))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vfl: error:") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "alice.csv"
    path.write_text("id,age,colour,income,y\n" "r1,30,red,10,1\n" "r2,200,blue,,2\n" "r3,40,green,5,3\n")
    return path


def _config(tmp_path, table, body: str, *, features='["age"]', extra: str = "") -> str:
    path = tmp_path / "alice.toml"
    path.write_text(f'[party]\nname = "alice"\nconnect = "{NOWHERE}"\ndata = "{table.name}"\nfeatures = {features}\n'
                    f'label = "y"\n{extra}\n{body}')
    return str(path)


# ------------------------------------------------------------------------------------------ item 1: inline bounds
@pytest.mark.parametrize("ids", [[], ["--id", "id"]])   # streamed from disk / loaded for the row alignment
def test_inline_bounds_in_the_party_config_are_checked_like_a_bounds_file(tmp_path, capsys, table, identity_dir, ids):
    """[0, 100] on data up to 200: refused inline exactly as in a --bounds file (it used to be ignored)."""
    inline = _config(tmp_path, table, "[bounds]\nage = [0, 100]\ny = [0, 10]\n")
    code, _, err = _run(capsys, "party", "--config", inline, "--identity-dir", identity_dir, "--no-progress", *ids)
    inline_error = _one_error(err)
    assert code == 2 and "outside its declared bounds [0, 100]" in inline_error
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("[bounds]\nage = [0, 100]\ny = [0, 10]\n")
    plain = _config(tmp_path, table, "")
    code, _, err = _run(capsys, "party", "--config", plain, "--bounds", bounds, "--identity-dir", identity_dir,
                        "--no-progress", *ids)
    assert code == 2 and _one_error(err) == inline_error


def test_bounds_declared_twice_are_one_clear_error(tmp_path, capsys, table, identity_dir):
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("[bounds]\nage = [0, 300]\ny = [0, 10]\n")
    inline = _config(tmp_path, table, "[bounds]\nage = [0, 300]\ny = [0, 10]\n")
    code, _, err = _run(capsys, "party", "--config", inline, "--bounds", bounds, "--identity-dir", identity_dir)
    assert code == 2 and "public bounds are declared twice, inline in" in _one_error(err)
    both = _config(tmp_path, table, "[bounds]\nage = [0, 300]\n", extra='bounds = "bounds.toml"')
    code, _, err = _run(capsys, "party", "--config", both, "--identity-dir", identity_dir)
    assert code == 2 and "declared twice" in _one_error(err) and "keep one of them" in err
    typo = _config(tmp_path, table, "[bound]\nage = [0, 300]\n")
    code, _, err = _run(capsys, "party", "--config", typo, "--identity-dir", identity_dir)
    assert code == 2 and "unknown table(s) bound" in _one_error(err)
    bad = _config(tmp_path, table, "[bounds]\nage = [5, 1]\n")
    code, _, err = _run(capsys, "party", "--config", bad, "--identity-dir", identity_dir)
    assert code == 2 and "bounds for 'age' must be finite with lo < hi" in _one_error(err)


# ------------------------------------------------------------------------------------------ item 11 at the party
@pytest.mark.parametrize("body, text", [
    ('[bounds]\nage = [0, 300]\nincome = [0, 100]\ny = [0, 10]\n[categories]\ncolour = ["red", "green"]\n'
     '[impute]\nincome = 50\n', "column 'colour', data row 2: 'blue' is not a declared category (red, green)"),
    ('[bounds]\nage = [0, 300]\nincome = [0, 100]\ny = [0, 10]\n[categories]\ncolour = ["red", "green", "blue"]\n',
     "column 'income', data row 2: '' is not a number (a missing value: declare a public constant to impute it, "
     "[impute] income = VALUE"),
    ('[bounds]\nage = [0, 300]\nincome = [0, 100]\ny = [0, 10]\n[categories]\ncolour = ["red", "green", "blue"]\n'
     '[impute]\nincome = 500\n', "impute value 500 of column 'income' lies outside its declared bounds [0, 100]"),
    ('[bounds]\nage = [0, 300]\nincome = [0, 100]\ncolour = [0, 2]\ny = [0, 10]\n[categories]\n'
     'colour = ["red", "green", "blue"]\n[impute]\nincome = 50\n', "column 'colour' is categorical"),
    ('[bounds]\nage = [0, 300]\nincome = [0, 100]\ny = [0, 10]\n[categories]\ncolour = "red"\n',
     "categories of 'colour' must be a list of names"),
    ('[bounds]\nage = [0, 300]\nincome = [0, 100]\n[categories]\ncolour = ["red", "green", "blue"]\n[impute]\n'
     'income = 50\ny = 1\n', "the label column 'y' cannot be categorical or imputed"),
])
def test_declared_preprocessing_errors_are_one_line_before_connecting(tmp_path, capsys, table, identity_dir, body,
                                                                     text):
    cfg = _config(tmp_path, table, body, features='["age", "colour", "income"]')
    code, _, err = _run(capsys, "party", "--config", cfg, "--identity-dir", identity_dir, "--no-progress")
    assert code == 2 and text in _one_error(err)


def test_a_site_bounds_file_with_preprocessing_is_refused_not_ignored(tmp_path):
    from vfl.data.config import load_bounds_file
    from vfl.exceptions import ConfigurationError

    path = tmp_path / "b.toml"
    path.write_text('[bounds]\nage = [0, 1]\n[impute]\nage = 0.5\n')
    with pytest.raises(ConfigurationError, match=r"\[impute\] \(declared preprocessing\) are read by `vfl party`"):
        load_bounds_file(path)


# ------------------------------------------------------------------------------------------ items 10, 11: predict
def _model(kind="linear") -> FittedModel:
    record = {"inputs": ["age", "colour"], "categories": {"colour": ["red", "green", "blue"]}, "impute": {}}
    parties = [PartyColumns("alice", ["age", "colour=red", "colour=green", "colour=blue"],
                            [[18, 90], [0, 1], [0, 1], [0, 1]], 0.5, True, intercept=True, preprocessing=record),
               PartyColumns("bob", ["income"], [[0, 100]], 0.5,
                            preprocessing={"inputs": ["income"], "categories": {}, "impute": {"income": 40}})]
    return FittedModel(kind, "gaussian-fm", parties, np.array([0.3, -0.2, 0.1, 0.4, 0.25, -0.1]),
                       [0.0, 10.0] if kind == "linear" else None, {"mechanism": "gaussian-fm"}, 100,
                       label_name="score")


RAW = "id,colour,income,age,other\nu1,red,10,20,x\nu2,blue,,90,y\nu3,green,100,18,z\n"
PREPARED = np.array([[20, 1, 0, 0, 10], [90, 0, 0, 1, 40], [18, 0, 1, 0, 100]], dtype=float)


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.fixture
def files(tmp_path, identity_dir):
    model = tmp_path / "model.json"
    signed(_model(), identity_dir).to_json(model)   # as its parties sign it (issue 29)
    data = tmp_path / "raw.csv"
    data.write_text(RAW)
    return model, data


def test_predict_applies_the_recorded_preprocessing_and_passes_ids_through(capsys, files):
    model, data = files
    code, out, err = _run(capsys, "predict", "--model", model, "--data", data, "--id", "id")
    assert code == 0, err
    rows = _csv(out)
    assert rows[0] == ["id", "score_predicted"] and [r[0] for r in rows[1:]] == ["u1", "u2", "u3"]
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], _model().predict(PREPARED), rtol=1e-9)
    code, out, _ = _run(capsys, "predict", "--model", model, "--data", data, "--output-column", "yhat")
    assert code == 0 and _csv(out)[0] == ["yhat"]


def test_predict_proba_says_probability(tmp_path, capsys, files, identity_dir):
    model, data = files
    code, _, err = _run(capsys, "predict", "--model", model, "--data", data, "--proba")
    assert code == 2 and "--proba is for logistic models" in _one_error(err)
    logistic = tmp_path / "logistic.json"
    signed(_model("logistic"), identity_dir).to_json(logistic)
    code, out, err = _run(capsys, "predict", "--model", logistic, "--data", data, "--proba", "--id", "id")
    assert code == 0, err
    rows = _csv(out)
    assert rows[0] == ["id", "score_probability"]
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], _model("logistic").predict_proba(PREPARED),
                               rtol=1e-9)


def test_predict_refuses_rows_outside_the_bounds_and_writes_nothing(tmp_path, capsys, files):
    """A row with age 150 for bounds [18, 90] is not scored silently: exit 2, one line, no (half-written) file."""
    model, data = files
    data.write_text(RAW.replace("u2,blue,,90,y", "u2,blue,,150,y"))
    out = tmp_path / "pred.csv"
    code, stdout, err = _run(capsys, "predict", "--model", model, "--data", data, "--out", out)
    line = _one_error(err)
    assert code == 2 and stdout == "" and not out.exists()
    assert "data row 2: age = 150 lies outside the model's public bounds [18, 90] (1 of 3 rows" in line
    assert "--out-of-bounds flag or clip" in line
    out.write_text("old\n")
    code, _, _ = _run(capsys, "predict", "--model", model, "--data", data, "--out", out, "--force")
    assert code == 2 and out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "model.json", "pred.csv", "raw.csv"]


def test_predict_flags_or_clips_rows_outside_the_bounds(capsys, files):
    model, data = files
    data.write_text(RAW.replace("u2,blue,,90,y", "u2,blue,,150,y").replace("u3,green,100,", "u3,green,-5,"))
    raw = PREPARED.copy()
    raw[1, 0], raw[2, 4] = 150, -5
    code, out, err = _run(capsys, "predict", "--model", model, "--data", data, "--out-of-bounds", "flag", "--id",
                          "id")
    assert code == 0 and "2 of 3 rows lie outside the model's public bounds (flagged" in err
    rows = _csv(out)
    assert rows[0] == ["id", "score_predicted", "out_of_bounds"] and [r[2] for r in rows[1:]] == ["", "age", "income"]
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], _model().predict(raw), rtol=1e-9)
    code, out, err = _run(capsys, "predict", "--model", model, "--data", data, "--out-of-bounds", "clip")
    assert code == 0 and "(clipped to them)" in err
    clipped = raw.copy()
    clipped[1, 0], clipped[2, 4] = 90, 0
    np.testing.assert_allclose([float(r[0]) for r in _csv(out)[1:]], _model().predict(clipped), rtol=1e-9)


@pytest.mark.parametrize("raw, text", [
    (RAW.replace("u2,blue", "u2,purple"), "column 'colour', data row 2: 'purple' is not a declared category"),
    (RAW.replace("u1,red", "u1,"), "column 'colour', data row 1: missing value"),
    (RAW.replace(",age,", ",years,"), "unknown feature(s) 'age'"),
])
def test_predict_data_errors_are_one_line(capsys, files, raw, text):
    model, data = files
    data.write_text(raw)
    code, out, err = _run(capsys, "predict", "--model", model, "--data", data)
    assert code == 2 and out == "" and text in _one_error(err)


def test_predict_refuses_an_unknown_schema_version_in_one_line(capsys, files):
    model, data = files
    doc = json.loads(model.read_text())
    model.write_text(json.dumps({**doc, "schema_version": 7}))
    code, out, err = _run(capsys, "predict", "--model", model, "--data", data)
    assert code == 2 and out == ""
    assert "vfl-model schema version 7 is unknown to vfl" in _one_error(err)


def test_predict_reads_a_version_1_model_file(tmp_path, capsys):
    """A file written before schema version 2 (no label name, no preprocessing) still predicts, behind the explicit
    opt-out for files written before models were signed."""
    doc = {"format": "vfl-model/1", "model": "linear", "mechanism": "none", "run_id": "", "n_samples": 3,
           "parties": [{"name": "a", "features": ["x1"], "bounds": [[0, 10]], "column_scale": 1.0,
                        "label_owner": True, "intercept": False}],
           "label_bounds": [0, 1], "w": [0.5], "coef": [0.1], "intercept": 0.5, "privacy_report": {}, "extra": {}}
    model = tmp_path / "old.json"
    model.write_text(json.dumps(doc))
    data = tmp_path / "d.csv"
    data.write_text("x1\n0\n10\n")
    code, out, err = _run(capsys, "predict", "--model", model, "--data", data)   # unsigned: refused (issue 29)
    assert code == 4 and out == "" and "no training roster" in err and "--allow-unsigned-model uses it" in err, err
    code, out, err = _run(capsys, "predict", "--model", model, "--data", data, "--allow-unsigned-model")
    assert code == 0, err
    assert "used ANYWAY (--allow-unsigned-model)" in err
    assert out.splitlines()[0] == "prediction" and [float(v) for v in out.split()[1:]] == [0.25, 0.75]
