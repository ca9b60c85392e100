"""vfl.models.modelio: coefficients back in original units, predict/score, JSON round trip, atomic writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.models.modelio import FittedModel, PartyColumns, atomic_write_text, load_model


def _model(rng, model="linear"):
    parties = [PartyColumns("a", ["a0", "a1"], [[0, 10], [-1, 1]], 0.5, True, intercept=True),
               PartyColumns("b", ["b0"], [[100, 200]], 0.5)]
    return FittedModel(model, "none", parties, rng.normal(size=4), [0.0, 50.0] if model == "linear" else None,
                       {"mechanism": "none"}, 40, "ab" * 16, {"k": 1})


def test_coefficients_in_original_units_reproduce_the_prepared_model(rng):
    m = _model(rng)
    X = np.column_stack([rng.uniform(0, 10, 25), rng.uniform(-1, 1, 25), rng.uniform(100, 200, 25)])
    lo = np.array([0.0, -1.0, 100.0])
    hi = np.array([10.0, 1.0, 200.0])
    prepared = np.column_stack([0.5 * (2 * (X - lo) / (hi - lo) - 1)[:, :2], np.full(25, 0.5),
                                0.5 * (2 * (X[:, 2] - 100) / 100 - 1)])
    y_unit = prepared @ m.w                       # the protocol's model, in the label's unit interval
    np.testing.assert_allclose(m.predict(X), 25.0 * (y_unit + 1.0), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(m.predict([X[:, :2], X[:, 2:]]), m.predict(X), rtol=0, atol=0)
    assert m.score(X, m.predict(X)) == 1.0


def test_logistic_models_predict_labels_and_probabilities(rng):
    m = _model(rng, "logistic")
    X = np.column_stack([rng.uniform(0, 10, 40), rng.uniform(-1, 1, 40), rng.uniform(100, 200, 40)])
    p = m.predict_proba(X)
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-m.decision_function(X))), rtol=1e-12)
    assert np.array_equal(m.predict(X), (p >= 0.5).astype(float))
    with pytest.raises(ConfigurationError):
        _model(rng).predict_proba(X)


def test_json_round_trip_is_exact_and_the_write_atomic(tmp_path, rng):
    m = _model(rng)
    path = tmp_path / "sub" / "model.json"
    m.to_json(path)
    back = load_model(path)
    assert np.array_equal(back.w, m.w) and np.array_equal(back.coef_, m.coef_)
    assert back.intercept_ == m.intercept_ and back.to_dict() == m.to_dict()
    assert [p.name for p in tmp_path.joinpath("sub").iterdir()] == ["model.json"]   # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "model.json"
    atomic_write_text(path, "old\n")

    with pytest.raises(TypeError):
        atomic_write_text(path, 42)  # type: ignore[arg-type]   # write() refuses a non-str: nothing replaced
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]


def test_bad_model_files_and_inputs_are_refused_with_one_line(tmp_path, rng):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        load_model(bad)
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ConfigurationError, match="not a vfl-model model file"):
        load_model(bad)
    with pytest.raises(ConfigurationError, match="not found"):
        load_model(tmp_path / "missing.json")
    with pytest.raises(ConfigurationError, match="coefficients for"):
        FittedModel("linear", "none", [PartyColumns("a", ["x"])], [1.0, 2.0])
    m = _model(rng)
    with pytest.raises(DataValidationError, match="expected 3 columns"):
        m.predict(np.zeros((2, 2)))
    with pytest.raises(DataValidationError, match="NaN"):
        m.predict(np.full((1, 3), np.nan))


def test_an_atomic_write_gets_the_mode_a_plain_write_would(tmp_path):
    """mkstemp makes 0o600 files; a new model file must get 0o666 & ~umask, a replaced one keeps its mode."""
    import os
    import stat

    old_umask = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.json"
        atomic_write_text(fresh, "{}\n")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        kept = tmp_path / "kept.json"
        kept.write_text("old\n")
        kept.chmod(0o640)
        atomic_write_text(kept, "new\n")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new\n"
    finally:
        os.umask(old_umask)


def test_model_files_are_versioned_with_label_keyed_coefficients_and_preprocessing(tmp_path, rng):
    """Schema version 2: header (format, schema_version, vfl_version, created UTC), label name, features ->
    coefficients, intercept, each party's preprocessing; read back equal."""
    from datetime import datetime

    import vfl
    from vfl.models.modelio import SCHEMA_VERSION

    record = {"inputs": ["c"], "categories": {"c": ["u", "v"]}, "impute": {}}
    parties = [PartyColumns("a", ["a0"], [[0, 10]], 0.5, True, intercept=True),
               PartyColumns("b", ["c=u", "c=v"], [[0, 1], [0, 1]], 0.5, preprocessing=record)]
    m = FittedModel("linear", "gaussian-fm", parties, rng.normal(size=4), [0.0, 5.0], {"mechanism": "gaussian-fm"},
                    9, "ab" * 16, label_name="score")
    path = tmp_path / "m.json"
    m.to_json(path)
    doc = json.loads(path.read_text())
    assert list(doc)[:4] == ["format", "schema_version", "vfl_version", "created"]
    assert doc["format"] == "vfl-model" and doc["schema_version"] == SCHEMA_VERSION == 2
    assert doc["vfl_version"] == vfl.__version__ and doc["label"] == "score" and doc["mechanism"] == "gaussian-fm"
    created = datetime.fromisoformat(doc["created"].replace("Z", "+00:00"))
    assert created.utcoffset().total_seconds() == 0 and doc["created"].endswith("Z")
    assert doc["features"] == ["a0", "c=u", "c=v"]
    assert doc["coefficients"] == dict(zip(["a0", "c=u", "c=v"], m.coef_.tolist(), strict=True))
    assert doc["intercept"] == m.intercept_ and doc["parties"][1]["preprocessing"] == record
    back = load_model(path)
    assert back.to_dict() == m.to_dict() and back.created == m.created and back.label_name == "score"


def test_a_feature_name_two_parties_share_is_keyed_by_party():
    parties = [PartyColumns("a", ["x", "y"], [[0, 1], [0, 1]], 1.0, True), PartyColumns("b", ["x"], [[0, 1]])]
    m = FittedModel("logistic", "none", parties, np.array([1.0, 2.0, 3.0]))
    assert list(m.coefficients()) == ["a:x", "y", "b:x"]


def test_version_1_files_are_still_read_and_unknown_versions_refused_in_one_line(tmp_path, rng):
    m = _model(rng)
    v1 = {k: v for k, v in m.to_dict().items() if k not in ("schema_version", "vfl_version", "created", "label",
                                                             "features", "coefficients")}
    v1["format"] = "vfl-model/1"
    for p in v1["parties"]:
        del p["preprocessing"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(v1))
    old = load_model(path)
    np.testing.assert_array_equal(old.coef_, m.coef_)
    assert old.created is None and old.vfl_version is None and old.label_name is None
    assert old.to_dict()["created"] is None            # unknown, not invented when re-saved
    newer = {**m.to_dict(), "schema_version": 3}
    path.write_text(json.dumps(newer))
    with pytest.raises(ConfigurationError) as info:
        load_model(path)
    text = str(info.value)
    assert "\n" not in text and "schema version 3 is unknown to vfl" in text and "reads versions 1 to 2" in text
    assert text.startswith(str(path))
    path.write_text(json.dumps({**m.to_dict(), "schema_version": "2"}))
    with pytest.raises(ConfigurationError, match="schema version '2' is unknown"):
        load_model(path)


def test_a_malformed_preprocessing_record_is_refused(tmp_path, rng):
    doc = _model(rng).to_dict()
    doc["parties"][1]["preprocessing"] = {"inputs": ["b0"], "categories": {"b0": ["u", "v"]}, "impute": {}}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigurationError, match="malformed model file: preprocessing record does not produce"):
        load_model(path)


def test_ica_model_files_share_the_header(tmp_path):
    from vfl.models.ica_model import ICAModel, load_ica_model

    K = 2
    m = ICAModel({"n_components": K}, 3, np.eye(3, K), np.ones(K), np.eye(K, 3), 1.0, np.eye(K), np.zeros(K), 4, 0,
                 True, [1.0], {"formal_dp": True}, ["s1", "s2"], "r" * 32)
    path = tmp_path / "ica.json"
    m.to_json(path)
    doc = json.loads(path.read_text())
    assert [doc[k] for k in ("format", "schema_version")] == ["vfl-cape-djica", 2] and doc["created"] == m.created
    assert load_ica_model(path).created == m.created
    doc["format"] = "vfl-cape-djica-1"
    path.write_text(json.dumps(doc))
    assert load_ica_model(path).created is None           # a version 1 file: no header
    path.write_text(json.dumps({**m.to_dict(), "schema_version": 9}))
    with pytest.raises(ConfigurationError, match="vfl-cape-djica schema version 9 is unknown"):
        load_ica_model(path)


def test_the_training_roster_is_an_optional_field_and_older_files_still_load(tmp_path, rng):
    """Issue 22: ``roster`` ({run, plan, entries}, the signed entries as the coordinator received them) round-trips;
    a file without it (written before) loads with roster None and is written back without the field; a roster that
    is not {run, plan, entries} is refused in one line."""
    m = _model(rng)
    assert m.roster is None and "roster" not in m.to_dict()
    m.roster = {"run": "ab" * 16, "plan": "cd" * 32, "entries": [{"party": "a", "registration": {"name": "a"}}]}
    m.to_json(tmp_path / "m.json")
    back = load_model(tmp_path / "m.json")
    assert back.roster == m.roster and back.to_dict() == m.to_dict()
    old = m.to_dict()
    del old["roster"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_model(tmp_path / "old.json").roster is None
    (tmp_path / "bad.json").write_text(json.dumps({**old, "roster": ["not", "a", "roster"]}))
    with pytest.raises(ConfigurationError, match="malformed model file: its roster is not"):
        load_model(tmp_path / "bad.json")
