"""vfl.data.datasets: checksummed loading, the paper's preprocessing, synthetic data, bounds, CSV helper."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import vfl.data.datasets as datasets
from vfl.data.datasets import (
    DATA_FILES,
    forest_fires,
    garment,
    load_csv_table,
    public_bounds,
    resolve_data_file,
    sha256_of,
    synthetic,
)
from vfl.exceptions import DataValidationError

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA_DIR / "forestfires.csv").is_file(), reason="../shared/data absent")


@pytest.fixture
def no_shared_dir(monkeypatch, tmp_path):
    """Hide ../shared/data and every data env var so resolution falls through to cache/download."""
    monkeypatch.setattr(datasets, "_repo_shared_data_dir", lambda: tmp_path / "nowhere")
    for var in ("VFL_DATA_DIR", "VFL_FORESTFIRES", "VFL_GARMENT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def refuse_download(url: str) -> bytes:
    raise AssertionError(f"unexpected download of {url}")


# --- checksums and resolution ---------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("name", ["forestfires", "garment"])
def test_shared_files_have_the_documented_sha256(name):
    spec = DATA_FILES[name]
    assert sha256_of((DATA_DIR / spec.file_name).read_bytes()) == spec.sha256
    assert resolve_data_file(name) == DATA_DIR / spec.file_name


@needs_data
def test_download_from_file_url_into_cache_then_reuse_cache(no_shared_dir):
    cache = no_shared_dir / "cache"
    url = (DATA_DIR / "forestfires.csv").resolve().as_uri()
    path = resolve_data_file("forestfires", cache_dir=cache, urls=["file:///does/not/exist.csv", url])
    assert path == cache / "forestfires.csv"
    assert sha256_of(path.read_bytes()) == DATA_FILES["forestfires"].sha256
    assert resolve_data_file("forestfires", cache_dir=cache, opener=refuse_download) == path
    assert list(cache.iterdir()) == [path]  # no temporary files left behind


@needs_data
def test_download_reads_member_of_zip_with_monkeypatched_opener(no_shared_dir):
    archive = no_shared_dir / "garment.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(DATA_DIR / "garments_worker_productivity.csv", "folder/garments_worker_productivity.csv")
    requested = []

    def opener(url: str) -> bytes:
        requested.append(url)
        return archive.read_bytes()

    path = resolve_data_file("garment", cache_dir=no_shared_dir / "c", urls=["https://example.org/g.zip"],
                             opener=opener)
    assert requested == ["https://example.org/g.zip"]
    assert sha256_of(path.read_bytes()) == DATA_FILES["garment"].sha256


@needs_data
def test_checksum_mismatch_raises_and_caches_nothing(no_shared_dir):
    tampered = no_shared_dir / "forestfires.csv"
    tampered.write_bytes((DATA_DIR / "forestfires.csv").read_bytes().replace(b"86.2", b"86.3", 1))
    cache = no_shared_dir / "cache"
    with pytest.raises(DataValidationError, match="sha256"):
        resolve_data_file("forestfires", cache_dir=cache, urls=[tampered.as_uri()])
    assert not cache.exists() or not any(cache.iterdir())
    with pytest.raises(DataValidationError, match="sha256"):
        resolve_data_file("forestfires", tampered)
    assert resolve_data_file("forestfires", tampered, verify=False) == tampered


def test_failed_download_names_the_urls(no_shared_dir):
    with pytest.raises(DataValidationError, match="could not download forestfires.csv"):
        resolve_data_file("forestfires", cache_dir=no_shared_dir / "c", urls=["file:///no/such/file.csv"])


@needs_data
def test_environment_variables(no_shared_dir, monkeypatch):
    copy_dir = no_shared_dir / "mydata"
    copy_dir.mkdir()
    shutil.copy(DATA_DIR / "garments_worker_productivity.csv", copy_dir)
    monkeypatch.setenv("VFL_DATA_DIR", str(copy_dir))
    assert resolve_data_file("garment", opener=refuse_download) == copy_dir / "garments_worker_productivity.csv"
    with pytest.raises(DataValidationError, match="no file"):
        resolve_data_file("forestfires", opener=refuse_download)  # an explicit location never downloads
    monkeypatch.setenv("VFL_FORESTFIRES", str(DATA_DIR / "forestfires.csv"))
    assert resolve_data_file("forestfires") == DATA_DIR / "forestfires.csv"


def test_default_cache_dir_honours_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert datasets.default_cache_dir() == tmp_path / "vfl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert datasets.default_cache_dir() == Path.home() / ".cache" / "vfl"


# --- preprocessing --------------------------------------------------------------------------------


@needs_data
def test_forest_fires_preprocessing():
    data = forest_fires()
    assert data.X.shape == (517, 27)
    assert {p: len(c) for p, c in data.party_columns.items()} == {"A": 23, "B": 4}
    assert data.party_columns["B"] == ["FFMC", "DMC", "DC", "ISI"]
    assert "month_mar" not in data.feature_names and "day_fri" not in data.feature_names  # first appearance
    assert "month_apr" in data.feature_names and "day_sun" in data.feature_names
    raw = np.genfromtxt(DATA_DIR / "forestfires.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    np.testing.assert_allclose(data.y, np.log(raw["area"] + 1.0))
    for name in ("X", "Y", "temp", "RH", "wind", "rain", "FFMC", "DMC", "DC", "ISI"):
        column = data.X[:, data.feature_names.index(name)]
        assert abs(column.mean()) < 1e-12 and column.std(ddof=1) == pytest.approx(1.0)
        np.testing.assert_allclose(column * data.scaling[name][1] + data.scaling[name][0], raw[name])
    dummies = data.X[:, [i for i, n in enumerate(data.feature_names) if n.startswith("month_")]]
    assert set(np.unique(dummies)) == {0.0, 1.0}
    assert dummies.sum() == np.sum(raw["month"] != "mar")
    blocks = data.party_blocks()
    assert [b.shape for b in blocks] == [(517, 23), (517, 4)]


@needs_data
def test_garment_preprocessing_and_the_authors_variance_ratio():
    data = garment()
    assert data.X.shape == (1197, 17)
    assert {p: len(c) for p, c in data.party_columns.items()} == {"A": 11, "B": 6}
    assert "department_finishing " in data.party_columns["B"]  # trailing-space level kept
    assert "department_sweing" in data.party_columns["B"]
    assert "day_Monday" not in data.feature_names and "wip" not in data.feature_names
    quarter = data.X[:, data.feature_names.index("quarter")]
    assert set(quarter) == {0.0, 1.0, 2.0, 3.0, 4.0}
    beta = np.linalg.lstsq(data.X, data.y, rcond=None)[0]
    ratio = np.var(data.X @ beta) / np.var(data.y)
    assert ratio == pytest.approx(0.414326460086318, abs=1e-13)  # from the authors' code comments


def test_synthetic_matches_section_3_2():
    data = synthetic(20000, 6, correlation=0.5, r2=0.7, random_state=3)
    assert data.X.shape == (20000, 6) and data.coef.shape == (6,)
    corr = np.corrcoef(data.X, rowvar=False)
    assert np.allclose(corr[np.triu_indices(6, 1)], 0.5, atol=0.03)
    assert np.allclose(data.X.std(axis=0), 1.0, atol=0.03)
    fitted = data.X @ data.coef
    assert 1 - np.var(data.y - fitted) / np.var(data.y) == pytest.approx(0.7, abs=0.02)
    again = synthetic(20000, 6, correlation=0.5, r2=0.7, random_state=3)
    np.testing.assert_array_equal(again.X, data.X)
    betas = np.concatenate([synthetic(10, 50, random_state=s).coef for s in range(40)])
    assert betas.mean() == pytest.approx(2.0, abs=0.1) and betas.std() == pytest.approx(1.5, abs=0.1)
    assert data.party_columns == {"A": ["x0", "x1", "x2"], "B": ["x3", "x4", "x5"]}
    with pytest.raises(DataValidationError):
        synthetic(100, 3, correlation=-0.9)


# --- bounds ---------------------------------------------------------------------------------------


def test_raw_public_bounds_are_the_documented_ones():
    raw = public_bounds("forestfires", space="raw")
    assert raw["FFMC"] == (18.7, 96.2) and raw["DC"] == (7.9, 860.6) and raw["RH"] == (15.0, 100.0)
    garment_raw = public_bounds("garment", space="raw")
    assert garment_raw["actual_productivity"] == (0.0, 1.0)
    assert set(garment_raw) == set(datasets.GARMENT_BOUND_SOURCES)
    with pytest.raises(DataValidationError):
        public_bounds("iris")


@needs_data
@pytest.mark.parametrize("name, loader", [("forestfires", forest_fires), ("garment", garment)])
def test_feature_bounds_cover_every_feature_and_the_target(name, loader):
    data = loader()
    bounds = public_bounds(name, dataset=data)
    assert list(bounds) == data.feature_names + [data.target_name]
    assert all(lo < hi for lo, hi in bounds.values())
    if name == "forestfires":
        mean, sd = data.scaling["FFMC"]
        assert bounds["FFMC"] == pytest.approx(((18.7 - mean) / sd, (96.2 - mean) / sd))
        # the documented ranges contain the data
        for j, feature in enumerate(data.feature_names):
            lo, hi = bounds[feature]
            assert lo - 1e-9 <= data.X[:, j].min() and data.X[:, j].max() <= hi + 1e-9


@needs_data
@pytest.mark.parametrize("mechanism", ["none", "laplace-fm", "gaussian-fm"])
def test_zscore_feature_bounds_cancel_in_the_fm_release(mechanism):
    """Forest fires' feature-space bounds use the data's own mean/sd, but FM's affine map to [-1, 1]
    absorbs them: the release equals a fit on the raw columns with the documented raw bounds. This holds for
    models with an intercept only: without one the map is the pure scaling x / max(|lo|, |hi|) (issue 13), and
    an affine change of the columns then changes the model class itself."""
    import warnings

    import vfl

    data = forest_fires()
    bounds = public_bounds("forestfires", dataset=data)
    raw_bounds = public_bounds("forestfires", space="raw")
    X_raw = data.X.copy()
    column_bounds_raw = []
    for j, feature in enumerate(data.feature_names):
        if feature in data.scaling:
            mean, sd = data.scaling[feature]
            X_raw[:, j] = data.X[:, j] * sd + mean
            column_bounds_raw.append(raw_bounds[feature])
        else:
            column_bounds_raw.append((0.0, 1.0))
    common = dict(mechanism=mechanism, epsilon=1.0, delta=1e-5, y_bounds=bounds[data.target_name],
                  fit_intercept=True, out_of_bounds="clip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = vfl.LinearRegression(bounds=[bounds[f] for f in data.feature_names], random_state=3, **common)
        raw = vfl.LinearRegression(bounds=column_bounds_raw, random_state=3, **common)
        scaled.fit(data.X, data.y)
        raw.fit(X_raw, data.y)
    np.testing.assert_allclose(scaled.predict(data.X), raw.predict(X_raw), rtol=0, atol=1e-10)


@needs_data
def test_data_derived_garment_bounds_are_labelled_as_such():
    """A declared bound that equals the file's exact (min, max) is read off the data: its source must say so."""
    data = garment()
    raw = public_bounds("garment", space="raw")
    columns = {f: data.X[:, j] for j, f in enumerate(data.feature_names)}
    derived = [f for f in data.feature_names if f in raw and raw[f] == (columns[f].min(), columns[f].max())]
    assert derived == ["quarter", "team"]
    for feature in raw:
        assert datasets.GARMENT_BOUND_SOURCES[feature].startswith("DATA-DERIVED") == (feature in derived)
    assert set(datasets.BOUNDS_PROVENANCE) == {"forestfires", "garment"}
    assert "data-derived" in datasets.BOUNDS_PROVENANCE["garment"]
    assert "min/max" in datasets.BOUNDS_PROVENANCE["forestfires"]


# --- generic CSV ----------------------------------------------------------------------------------


def test_load_csv_table(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("a,b\n1,2.5\n-3,4e2\n")
    names, values = load_csv_table(good)
    assert names == ["a", "b"]
    np.testing.assert_array_equal(values, [[1.0, 2.5], [-3.0, 400.0]])
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,x\n")
    with pytest.raises(DataValidationError, match=r"column 'b', data row 2: 'x' is not a number"):
        load_csv_table(bad)
    nan = tmp_path / "nan.csv"
    nan.write_text("a,b\n1,nan\n")
    with pytest.raises(DataValidationError, match=r"column 'b', data row 1: 'nan' is not finite"):
        load_csv_table(nan)
    empty_cell = tmp_path / "empty.csv"
    empty_cell.write_text("a,b\n1,\n")
    with pytest.raises(DataValidationError, match="column 'b', data row 1"):
        load_csv_table(empty_cell)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b\n1,2,3\n")
    with pytest.raises(DataValidationError, match="data row 1 has 3 cells"):
        load_csv_table(ragged)


# --- shipped party configurations -----------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("folder, loader", [("forestfires", forest_fires), ("garment", garment)])
def test_party_configs_match_the_split(folder, loader):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    data = loader()
    root = Path(__file__).resolve().parents[2] / "parties" / folder
    alice = tomllib.loads((root / "alice.toml").read_text())["party"]
    bob = tomllib.loads((root / "bob.toml").read_text())["party"]
    assert alice["features"] == data.party_columns["A"] and bob["features"] == data.party_columns["B"]
    assert alice["label"] == data.target_name and "label" not in bob
    assert alice["dataset"] == bob["dataset"] == folder
