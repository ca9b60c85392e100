"""``vfl report`` (issue 31): the text and the self-contained HTML page of a model file, with and without an inference
record, and its refusals. The networked end-to-end run with the browser test is tests/net/test_report_network.py."""

from __future__ import annotations

import copy
import json
import re

import pytest
from helpers.browser import load_page

from vfl.cli import main
from vfl.exceptions import ConfigurationError
from vfl.models.report import NO_INTERVALS, coefficient_rows, guarantee_lines, report_html, report_text

REPORT = {"mechanism": "gaussian-fm", "model": "linear", "epsilon_claimed": 1.0, "epsilon": 1.0, "delta": 1e-5,
          "formal_dp": True, "neighbouring": "bounded DP: replace one row", "seeded": False,
          "parties": [{"party": 0, "name": "alice", "epsilon": 1.0,
                       "epsilon_against": {"coordinator": 0.84, "each party": 1.0}},
                      {"party": 1, "name": "bob", "epsilon": 0.79,
                       "epsilon_against": {"coordinator": 0.6, "each party": 0.79}}],
          "epsilon_against": {"coordinator": 0.87, "each party": 1.0, "party + coordinator": 1.0}}
MODEL = {"format": "vfl-model", "schema_version": 2, "model": "linear", "mechanism": "gaussian-fm", "run_id": "ab" * 16,
         "n_samples": 800, "label": "outcome", "label_bounds": [0.0, 10.0], "features": ["age", "income", "visits"],
         "coef": [0.5, -1.25, 2.0], "intercept": 3.0,
         "parties": [{"name": "alice", "features": ["age", "income"], "bounds": [[18, 90], [0, 1e5]],
                      "label_owner": True, "intercept": True},
                     {"name": "bob", "features": ["visits"], "bounds": [[0, 50]], "label_owner": False,
                      "intercept": False}],
         "privacy_report": REPORT}
INFERENCE = {"method": "parametric bootstrap", "alpha": 0.05, "names": ["age", "income", "visits", "intercept"],
             "coef": [0.5, -1.25, 2.0, 3.0], "bse": [0.1, 0.5, 0.4, 0.2],
             "conf_int": [[0.3, 0.7], [-2.2, -0.3], [1.2, 2.8], [2.6, 3.4]], "pvalues": [1e-6, 0.012, 5e-7, 0.0],
             "n_bootstrap": 500, "fit": {"r2": 0.31, "r2_conf_int": [0.2, 0.4], "mse": 2.5},
             "warnings": ["the model is no better than predicting the mean of y"]}


def _with_inference() -> dict:
    doc = copy.deepcopy(MODEL)
    doc["inference"] = copy.deepcopy(INFERENCE)
    return doc


def test_text_shows_intervals_p_values_fit_warnings_and_the_guarantee():
    text = report_text(_with_inference())
    assert "trained on 800 rows" in text and "95% confidence intervals (parametric bootstrap" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("income"))
    assert row.split() == ["income", "-1.25", "0.5", "-2.2", "-0.3", "0.012"]
    assert "r2: 0.31  [0.2, 0.4]" in text and "WARNING: the model is no better than predicting the mean" in text
    assert "formal differential privacy: yes" in text and "epsilon = 1, except with probability delta = 1e-05" in text
    assert "against the coordinator alone: epsilon = 0.87" in text
    assert "the columns of party bob alone (only its part of a row changes): epsilon = 0.79" in text


def test_a_model_without_inference_says_so():
    text = report_text(MODEL)
    assert NO_INTERVALS in text and "intercept" in text and "Fit measures: none recorded" in text
    rows, inf = coefficient_rows(MODEL)
    assert inf is None and [r.name for r in rows] == ["age", "income", "visits", "intercept"]


def test_guarantee_of_a_model_that_is_not_formally_dp_or_has_no_noise():
    lines = guarantee_lines({**REPORT, "formal_dp": False, "formal_dp_reasons": ["bounds taken from the data"],
                             "seeded": True})
    assert "formal differential privacy: NO (bounds taken from the data)" in lines[1]
    assert any("fixed seed" in line for line in lines)
    assert "adds no noise" in guarantee_lines({**REPORT, "epsilon": None, "mechanism": "none"})[1]


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d["inference"].update(names=["a", "b", "c", "intercept"]), "does not match its coefficients"),
    (lambda d: d["inference"].update(bse=[0.1]), "does not match its coefficients"),
    (lambda d: d.pop("format"), "not a vfl model file"),
])
def test_malformed_model_files_are_refused(mutate, message):
    doc = _with_inference()
    mutate(doc)
    with pytest.raises(ConfigurationError, match=message):
        report_text(doc)


def test_html_page_is_self_contained_and_holds_every_section():
    page = report_html(_with_inference(), planner_replicates=20, random_state=1)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 2   # coefficients, planner (no ledger)
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!#)""", page)   # nothing loaded from anywhere
    assert "<script" not in page and "http" not in re.sub(r'xmlns(:\w+)?="[^"]*"', "", page)   # namespaces only
    for name in INFERENCE["names"]:
        assert f"<td>{name}</td>" in page
    assert "[-2.2, -0.3]" in page and "Privacy guarantee" in page and "Error against epsilon" in page


def test_cli_report_refuses_to_overwrite_and_reads_bad_files_in_one_line(tmp_path, capsys):
    model = tmp_path / "model.json"
    model.write_text(json.dumps(MODEL))
    out = tmp_path / "report.html"
    out.write_text("keep me")
    assert main(["report", str(model), "--html", str(out)]) == 2
    assert "exists; refusing to overwrite it (use --force)" in capsys.readouterr().err and out.read_text() == "keep me"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vfl: error: cannot read model file")
    assert main(["report", str(tmp_path / "none.json")]) == 2
    assert not (tmp_path / "none.json").exists()


def test_the_browser_check_can_fail(tmp_path):
    """The console-error check of the page tests catches a page with a script error (a negative control)."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>undefinedFunction();</script></body></html>")
    page = load_page(bad, tmp_path)
    assert page.console_errors, "a page with an uncaught error must show a console error"


def test_fit_measures_pair_each_value_with_its_interval():
    from vfl.models.report import fit_lines

    lines = fit_lines({"fit": {"taylor_gain_over_base_rate": 0.01, "taylor_gain_conf_int": [-0.01, 0.03],
                               "r2": None, "r2_conf_int": None, "base_rate": 0.4}, "warnings": []})
    assert lines[1:] == ["  taylor gain over base rate: 0.01  [-0.01, 0.03]", "  r2: n/a", "  base rate: 0.4"]
