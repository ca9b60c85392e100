"""Smoke tests of the benchmark figures (vfl.plots): render with the Agg backend to a temporary PNG."""

from __future__ import annotations

import struct
import sys

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError
from vfl.plots import QuantileBand, plot_error_vs_n, plot_privacy_utility

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk; asserts the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


EPS = [0.1, 0.5, 1.0, 5.0, 10.0]


def band(scale: float) -> QuantileBand:
    centre = scale / np.asarray(EPS)
    return QuantileBand(EPS, centre, 0.7 * centre, 1.5 * centre)


def test_module_import_does_not_import_matplotlib():
    # vfl.plots is importable without matplotlib: the import happens only when a figure is drawn
    code = "import sys, vfl.plots; assert 'matplotlib' not in sys.modules"
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


def test_privacy_utility_panels_render_png(tmp_path):
    pytest.importorskip("matplotlib")
    panels = {"N = 1,000": {"Gaussian FM": band(10.0), "Laplace FM": band(100.0)},
              "N = 10,000": {"Gaussian FM": band(1.0), "Laplace FM": (EPS, [5, 4, 3, 2, np.nan], [4] * 5, [6] * 5)}}
    out = plot_privacy_utility(panels, tmp_path / "pu.png", references={"non-private": 0.5}, title="smoke")
    assert out == tmp_path / "pu.png" and out.stat().st_size > 1000
    width, height = png_size(out)
    assert width > height > 100          # two panels side by side


def test_error_vs_n_single_panel_with_nonpositive_values(tmp_path):
    pytest.importorskip("matplotlib")
    ns = [1_000, 10_000, 100_000]
    series = {"non-private": QuantileBand(ns, [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]),
              "Gaussian FM": QuantileBand(ns, [3.0, 1.5, 1.1], [0.0, 1.2, 1.0], [9.0, 2.0, 1.2])}  # 0 dropped on log
    out = plot_error_vs_n(series, tmp_path / "n.png", colours={"non-private": "black"})
    width, height = png_size(out)
    assert width > 100 and height > 100


def test_mismatched_band_lengths_raise(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(ConfigurationError, match="one length"):
        plot_privacy_utility({"bad": QuantileBand([1, 2], [1, 2, 3], [1, 2], [1, 2])}, tmp_path / "bad.png")
    with pytest.raises(ConfigurationError, match="empty"):
        plot_privacy_utility({}, tmp_path / "empty.png")
    assert not (tmp_path / "bad.png").exists()


# ------------------------------------------------------------------ benchmarks/privacy_utility.py
def load_benchmark():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "privacy_utility.py"
    spec = importlib.util.spec_from_file_location("privacy_utility_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


def test_benchmark_fast_path_equals_estimators():
    """The benchmark's reuse of exact FM statistics gives the estimators' coefficients for the same seed."""
    bench = load_benchmark()
    split = bench.make_split(1_000, seed=3)
    with pytest.warns(Warning):  # clipping to the public bounds and paper calibration both warn
        assert bench.verify_fast_path(split, n=1_000, epsilon=0.5, seed=11) <= 1e-8
    # public label bounds come from the population (beta, Sigma = I, R^2 = 0.5), not from the sample
    assert split.y_bounds[1] == pytest.approx(3.0 * np.sqrt(split.beta @ split.beta / 0.5), rel=1e-12)
    assert split.y_bounds[0] == -split.y_bounds[1]


@pytest.mark.slow
def test_benchmark_quick_run_writes_outputs(tmp_path):
    pytest.importorskip("matplotlib")
    bench = load_benchmark()
    bench.main(["--quick", "--out", str(tmp_path), "--seed", "5"])
    import json

    report = json.loads((tmp_path / "results.json").read_text())
    cell = report["results"]["linear"]["1000"]["gaussian-fm"]["by_epsilon"]["1"]
    assert len(cell["values"]) == 30 and cell["q025"] <= cell["median"] <= cell["q975"]
    for name in ("privacy_utility_linear.png", "error_vs_n_logistic_eps0.5.png"):
        assert png_size(tmp_path / name)[0] > 100


# ------------------------------------------------------------------ examples/ (forest fires, garment)
def load_examples_driver():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "_common.py"
    spec = importlib.util.spec_from_file_location("vfl_examples_common", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


def test_example_outputs_state_formal_dp_false_and_bounds_provenance(tmp_path):
    """Every output of the real-data examples (JSON, Markdown) carries DP-BCD's formal_dp: false with
    its reason and says which FM bounds are data-derived; the figures are written as PNG."""
    import argparse
    import json
    from pathlib import Path

    pytest.importorskip("matplotlib")
    data_file = Path(__file__).resolve().parents[3] / "shared" / "data" / "forestfires.csv"
    if not data_file.is_file():
        pytest.skip("../shared/data absent")
    from vfl.data.datasets import BOUNDS_PROVENANCE, forest_fires
    from vfl.models.bcd import FORMAL_DP_REASON

    driver = load_examples_driver()
    args = argparse.Namespace(repetitions=2, out=tmp_path, gamma=1.2, rounds=5, seed=1, no_plots=False)
    results = driver.run_benchmark(forest_fires(data_file), args)
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["dp_bcd_privacy"] == {"formal_dp": False, "reason": FORMAL_DP_REASON}
    assert stored["fm_bounds_provenance"] == BOUNDS_PROVENANCE["forestfires"]
    for row in stored["by_epsilon"].values():
        assert row["dp-bcd"]["extra"]["formal_dp"] is False
        assert row["dp-bcd-resample"]["extra"]["formal_dp_reason"] == FORMAL_DP_REASON
    table = (tmp_path / "results.md").read_text()
    assert "formal_dp = false" in table and FORMAL_DP_REASON in table
    assert BOUNDS_PROVENANCE["forestfires"] in table and "Why DP-BCD numbers can differ" in table
    assert "1 - 1.2^20 (1 - 0.0723) = -34.6" in table  # the utility bound with R*^2 of 5-round BCD
    assert round(results["bcd5_r2"], 13) == 0.0723196328281
    for name in ["r2_vs_epsilon.png"] + [f"coefficients_eps{e}.png" for e in results["by_epsilon"]]:
        assert png_size(tmp_path / name)[0] > 100
