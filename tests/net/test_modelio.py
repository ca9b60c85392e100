"""vfl.net.modelio: coefficients back in original units, predict/score, JSON round trip, atomic writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.net.modelio import FittedModel, PartyColumns, atomic_write_text, load_model


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
    with pytest.raises(ConfigurationError, match="not a vfl-model/1"):
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
