"""Issue 21 item 13, the smaller things a new user meets, each on the user's path (the command they type):

* ``vfl demo`` never prints a folder it deletes (``--out-dir`` keeps one); ``vfl demo --epsilon 0`` is refused
  before any file is written or process started;
* the capeFM aggregator prints no stray ``noise: True`` and says where S_C came from and whom it protects against
  (0 colluding sites for 3 sites by default);
* ``benchmarks/privacy_utility.py`` writes nothing into the folder it is run from unless told to (``--out``);
* ``r2_vs_epsilon.png``: medians below the axis are marked with their value, and a reference line hiding another
  (5-round BCD under OLS on forest fires) says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from vfl.cli import main
from vfl.demo import free_port, wait_all
from vfl.secure.identity import write_identities

REPO = Path(__file__).resolve().parents[1]
VFL = [sys.executable, "-m", "vfl.cli"]
SHARED_DATA = REPO.parent / "shared" / "data"


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------------- vfl demo
@pytest.mark.parametrize(("argv", "message"), [
    (["--epsilon", "0"], "needs --epsilon > 0"),
    (["--delta", "1"], "--delta"),
    (["--rows", "3"], "--rows must be an integer >= 10"),
    (["--key-bits", "100"], "--key-bits"),
])
def test_demo_refuses_bad_options_before_anything_starts(capsys, monkeypatch, tmp_path, argv, message) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # where a demo folder would appear
    code, out, err = _run(capsys, "demo", *argv)
    assert code in (1, 2) and message in err and "Traceback" not in err
    assert out == ""                                             # no banner: nothing was started
    assert list(tmp_path.iterdir()) == []                        # no data folder was written


def test_demo_refuses_a_non_empty_out_dir(capsys, tmp_path) -> None:
    (tmp_path / "model.json").write_text("{}")
    code, out, err = _run(capsys, "demo", "--out-dir", tmp_path)
    assert code == 2 and "give a new or empty folder" in err and out == ""


@pytest.mark.network
@pytest.mark.timeout(900)
@pytest.mark.slow   # ~10 s; .ci/run runs it in its own step
def test_demo_prints_only_a_folder_it_keeps(tmp_path) -> None:
    """Also (issue 32): the demo's runs go to throwaway ledgers in its folder, never the user's, and its plan line
    names the label owner's intercept column."""
    home = tmp_path / "home"
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), VFL_LEDGER=str(tmp_path / "ledgers"), HOME=str(home),
               XDG_DATA_HOME=str(home / "data"))
    (tmp_path / "tmp").mkdir()
    fast = ["--rows", "200", "--key-bits", "1024", "--timeout", "300"]
    default = subprocess.run([*VFL, "demo", *fast], capture_output=True, text=True, env=env, timeout=800)
    assert default.returncode == 0, default.stderr
    assert "temporary folder, removed at the end" in default.stdout
    assert str(tmp_path / "tmp") not in default.stdout + default.stderr     # no path that will not exist
    assert list((tmp_path / "tmp").iterdir()) == []                        # and it was removed
    kept = tmp_path / "demo"
    run = subprocess.run([*VFL, "demo", *fast, "--out-dir", str(kept)], capture_output=True, text=True, env=env,
                         timeout=800)
    assert run.returncode == 0, run.stderr
    assert f"data, keys and model in {kept} (kept)" in run.stdout and f"model in {kept / 'model.json'}" in run.stdout
    assert (kept / "model.json").is_file() and (kept / "alice.csv").is_file()
    assert not (tmp_path / "ledgers").exists() and not (home / "data").exists()   # the user's ledgers: untouched
    assert sorted(p.name for p in kept.glob("ledger-*.sqlite")) == ["ledger-alice.sqlite", "ledger-bob.sqlite"]
    plan = [ln for ln in run.stdout.splitlines() if ln.startswith("[bob] plan:")]
    assert plan and "parties alice (3 cols + intercept, label), bob (2 cols)" in plan[0], run.stdout


# ------------------------------------------------------------------------------------------------- capeFM
@pytest.mark.slow   # 4-8 s of real processes; .ci/run's slow step runs this file
@pytest.mark.network
@pytest.mark.timeout(600)
def test_capefm_says_where_s_c_came_from_and_prints_no_stray_noise_flag(tmp_path) -> None:
    rng = np.random.default_rng(4)
    (tmp_path / "bounds.toml").write_text("[bounds]\na = [0.0, 1.0]\nb = [-1.0, 1.0]\ny = [-3.0, 3.0]\n")
    for i in range(3):
        X = np.column_stack([rng.uniform(0, 1, 60), rng.uniform(-1, 1, 60)])
        y = np.clip(X @ [1.0, -0.5] + rng.normal(0, 0.2, 60), -3, 3)
        (tmp_path / f"s{i}.csv").write_text("a,b,y\n" + "".join(f"{r[0]:.17g},{r[1]:.17g},{t:.17g}\n"
                                                              for r, t in zip(X, y, strict=True)))
    ids = str(tmp_path / "identities")   # the sites' signing identities, as `vfl keys` writes them
    write_identities(ids, [f"s{i}" for i in range(3)])
    url = f"tcp://127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([*VFL, "coordinator", "--mechanism", "cape-fm", "--sites", "3", "--epsilon", "1",
                               "--bind", url, "--out", str(tmp_path / "model.json"), "--timeout", "300"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    try:
        procs += [subprocess.Popen([*VFL, "site", "--connect", url, "--name", f"s{i}", "--data",
                                    str(tmp_path / f"s{i}.csv"), "--features", "a,b", "--label", "y", "--bounds",
                                    str(tmp_path / "bounds.toml"), "--timeout", "300", "--identity-dir", ids],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
        wait_all(procs, 500)   # the first failure ends the others (no waiting out a registration window)
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [o[1] for o in outputs]
    text = outputs[0][0] + outputs[0][1]
    assert "noise: True" not in text
    assert "the default ceil(S/3) - 1 for 3 sites; --colluding sets it" in text
    assert "protects it against the aggregator alone, no colluding site" in text
    assert "no colluding site is tolerated" in text                       # in the report too


# ------------------------------------------------------------------------------------------------- benchmark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_privacy_utility_benchmark_writes_nothing_into_the_working_folder(tmp_path) -> None:
    work, tmp = tmp_path / "clone", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "privacy_utility.py"), "--quick", "--no-plots"],
                          cwd=work, capture_output=True, text=True, timeout=550,
                          env=dict(os.environ, TMPDIR=str(tmp)))
    assert done.returncode == 0, done.stderr
    assert list(work.iterdir()) == []
    (folder,) = tmp.iterdir()
    assert folder.name.startswith("vfl-privacy-utility-") and (folder / "results.json").is_file()
    assert str(folder / "results.json") in done.stdout                  # the folder is named at the end


# ------------------------------------------------------------------------------------------------- figure
def _png_text(path: Path) -> dict[str, str]:
    from PIL import Image

    with Image.open(path) as image:
        return dict(image.text)


def test_r2_chart_marks_medians_below_the_axis_and_overlapping_references() -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    from vfl.plots import draw_r2_vs_epsilon

    fig, ax = plt.subplots()
    eps = [0.2, 1.0, 10.0]
    notes = draw_r2_vs_epsilon(ax, eps, {"Laplace FM": ([-37.0, -1.5, 0.2], [-80, -3, 0.1], [-5, 0, 0.3]),
                                         "Gaussian FM": ([0.1, 0.2, 0.3], [0, 0.1, 0.2], [0.2, 0.3, 0.4])},
                               references={"OLS": 0.3, "BCD": 0.299}, y_limits=(-1.0, 0.5))
    try:
        laplace = ax.get_lines()[0]
        shown = np.asarray(laplace.get_ydata(), dtype=float)
        assert np.isnan(shown[:2]).all() and shown[2] == 0.2             # no median drawn outside the axis
        triangles = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
        assert len(triangles) == 2 and all(-1.0 < ln.get_ydata()[0] < -0.9 for ln in triangles)
        assert sorted(t.get_text() for t in ax.texts) == ["-1.50", "-37.00"]
        labels = ax.get_legend_handles_labels()[1]
        assert "OLS (R^2 0.300)" in labels and "BCD (R^2 0.299; overlaps OLS)" in labels
        refs = [ln for ln in ax.get_lines() if ln.get_label().startswith(("OLS", "BCD"))]
        assert len({ln.get_color() for ln in refs}) == 2 and len({ln.get_linestyle() for ln in refs}) == 2
        assert any("below the axis" in n for n in notes) and any("overlaps OLS" in n for n in notes)
    finally:
        plt.close(fig)


@pytest.mark.slow   # 4-8 s of real processes; .ci/run's slow step runs this file
@pytest.mark.skipif(not (SHARED_DATA / "forestfires.csv").is_file(), reason="../shared/data absent")
@pytest.mark.timeout(600)
def test_forest_fires_example_figure_says_what_the_axis_hides(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    done = subprocess.run([sys.executable, str(REPO / "examples" / "forest_fires.py"), "--quick", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=550,
                          env=dict(os.environ, VFL_DATA_DIR=str(SHARED_DATA)))
    assert done.returncode == 0, done.stderr
    description = _png_text(tmp_path / "r2_vs_epsilon.png")["Description"]
    assert "Laplace FM: median R^2" in description and "below the axis" in description
    assert "BCD, 5 rounds (R^2 0.07" in description and "overlaps centralized OLS" in description
