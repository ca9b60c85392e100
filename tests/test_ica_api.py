"""vfl.fit_ica_sites (networked capePCA + capeDJICA on loopback) and the djica CLI's option checks (issue 11)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import vfl
from vfl.cli import main
from vfl.data.synthetic_ica import make_joint_ica
from vfl.exceptions import ConfigurationError, DataValidationError
from vfl.models.cape_ica import CapeICAConfig, fit_cape_ica
from vfl.models.ica_model import ICAModel, load_ica_model

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner


def test_fit_ica_sites_equals_in_process_and_writes_a_loadable_model(tmp_path):
    data = make_joint_ica(3, 2, 50, 3, 6, scale_sd=2.0, random_state=2)
    # names out of order: the aggregator orders sites by name, as fit_cape_ica must get them
    sites = {"c": data.sites[2], "a": data.sites[0], "b": data.sites[1]}
    out = tmp_path / "ica.json"
    model = vfl.fit_ica_sites(sites, 3, epsilon=2.0, max_iter=8, random_state=4, out=str(out))
    ref = fit_cape_ica(data.sites, CapeICAConfig(3, 2.0, max_iter=8), random_state=4)
    assert np.array_equal(model.unmixing, ref.ica.unmixing_) and np.array_equal(model.whitening, ref.whitening)
    np.testing.assert_array_equal(model.transform(data.sites[0]), ref.unmixing_ @ data.sites[0])
    loaded = load_ica_model(out)
    assert np.array_equal(loaded.unmixing, model.unmixing) and loaded.sites == ["a", "b", "c"]
    doc = json.loads(out.read_text())
    assert doc["format"] == "vfl-cape-djica" and doc["schema_version"] == 2 and doc["created"].endswith("Z")
    assert loaded.privacy_report["formal_dp"] is False  # seeded
    # the sites' copy (RESULT) leaves out the D-sized arrays
    compact = ICAModel.from_dict(model.to_dict(compact=True))
    assert compact.components is None and compact.whitening is None
    with pytest.raises(ConfigurationError, match="sites' copy"):
        compact.transform(data.sites[0])


def test_fit_ica_sites_bad_input():
    data = make_joint_ica(2, 1, 30, 2, 4, scale_sd=2.0, random_state=1)
    with pytest.raises(ConfigurationError, match="at least 2 sites"):
        vfl.fit_ica_sites({"a": data.sites[0]}, 2)
    with pytest.raises(DataValidationError, match="scale"):
        vfl.fit_ica_sites({"a": data.sites[0] * 9, "b": data.sites[1]}, 2)
    bad = data.sites[1].copy()
    bad[0, 0] = np.nan
    with pytest.raises(DataValidationError, match="NaN"):
        vfl.fit_ica_sites({"a": data.sites[0], "b": bad}, 2)
    with pytest.raises(ConfigurationError, match="pca_share"):
        vfl.fit_ica_sites({"a": data.sites[0], "b": data.sites[1]}, 2, pca_share=1.0)
    with pytest.raises(ConfigurationError, match="at least 2 components"):
        vfl.fit_ica_sites({"a": data.sites[0], "b": data.sites[1]}, 1)
    with pytest.raises(ConfigurationError, match="at most 100000"):
        vfl.fit_ica_sites({"a": data.sites[0], "b": data.sites[1]}, 2, max_iter=100_001)
    with pytest.raises(DataValidationError, match="more than the 100000"):
        vfl.fit_ica_sites({"a": np.zeros((100_001, 1)), "b": np.zeros((100_001, 1))}, 2)


@pytest.mark.parametrize("extra, text", [
    (["--sites", "1"], "--sites must be an integer in [2, 1000]"),
    (["--rounds", "0"], "Invalid value for '--rounds': 0 is not in the range 1<=x<=100000"),
    (["--rounds", "100001"], "Invalid value for '--rounds': 100001 is not in the range 1<=x<=100000"),
    (["--max-message-bytes", "-1"], "--max-message-bytes must lie in [65536, 268435456], got -1"),
    (["--max-message-bytes", str(2**40)], "--max-message-bytes must lie in [65536, 268435456]"),
    # the shares round: 8 J (K^2 + K) bytes = 8 * 1000 * 420 > 1 000 000
    (["--components", "20", "--rounds", "1000", "--max-message-bytes", "1000000"],
     "the shares round sends 3376384 bytes per message, above the aggregator's message limit of 1000000 bytes"),
    (["--unit-size", "0"], "Invalid value for '--unit-size'"),
    (["--pca-share", "1.5"], "pca_share must be < 1"),
    (["--epsilon", "inf"], "epsilon"),
    (["--components", "1"], "at least 2 components"),
])
def test_djica_aggregator_option_errors_are_one_line_before_binding(capsys, tmp_path, extra, text):
    argv = ["djica-aggregator", "--sites", "2", "--components", "2", "--epsilon", "1", "--out",
            str(tmp_path / "m.json"), "--bind", "tcp://127.0.0.1:1", *extra]
    rc = main(argv)
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc in (1, 2) and len(lines) == 1 and text in lines[0], err
    assert not (tmp_path / "m.json").exists()
