"""Benchmark data sets: UCI forest fires, UCI garment productivity, and de Jong et al.'s synthetic data.

The two real data sets are the real-data benchmarks of de Jong, Kamphorst & Kroes, "Differentially
Private Block Coordinate Descent for Linear Regression on Vertically Partitioned Data",
J. Cybersecur. Priv. 2022, 2, 862-881 (Section 3.3), preprocessed exactly as there (issue 5, item 4):

* **forest fires** (Cortez & Morais 2007): ``month`` and ``day`` as 0/1 dummies with the first level
  *in order of appearance* dropped (``mar``, ``fri``), the ten continuous columns z-scored (sample sd,
  ``ddof=1``, as R's ``scale``), target ``log(area + 1)``, no intercept. Party A = X, Y, the month and
  day dummies, temp, RH, wind, rain (23 columns, holds the label); party B = FFMC, DMC, DC, ISI (4).
  Check: 5 rounds of non-private BCD give R^2 = 0.0723196328281 (the authors' figure, 13 digits).
* **garment** (Imran et al. 2019): ``wip`` and ``date`` dropped; ``quarter`` as integer category codes
  (``Quarter1`` -> 0, ..., ``Quarter5`` -> 4); ``department`` (raw values kept: ``sweing``,
  ``finishing `` with a trailing space, ``finishing``) and ``day`` as dummies with the first level *in
  sorted order* dropped (``finishing``, ``Monday``; this is pandas ``get_dummies(drop_first=True)``);
  no scaling; target ``actual_productivity``. Party A = quarter, team, targeted_productivity, smv,
  over_time, incentive and the day dummies (11, holds the label); party B = idle_time, idle_men,
  no_of_style_change, no_of_workers and the department dummies (6). Check: the OLS variance ratio
  var(X beta_ols)/var(y) = 0.414326460086318 from the authors' code comments is reproduced to 14 digits
  by this coding and by no other of the four (quarter 0/1-based x dummies sorted/appearance).

Files are found by :func:`resolve_data_file`: explicit path, environment variable, ``../shared/data``
next to the repository, user cache, or a download from the UCI archive into the cache; the sha256 of
the bytes is always checked.
"""

from __future__ import annotations

import csv
import hashlib
import http.client
import io
import math
import os
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vfl.exceptions import DataValidationError
from vfl.rng import RandomState, make_rng

__all__ = [
    "Dataset",
    "DataFileSpec",
    "DATA_FILES",
    "forest_fires",
    "garment",
    "synthetic",
    "public_bounds",
    "BOUNDS_PROVENANCE",
    "load_csv_table",
    "resolve_data_file",
    "sha256_of",
]

Opener = Callable[[str], bytes]


@dataclass(frozen=True)
class DataFileSpec:
    """Where a raw UCI file comes from and what its bytes must hash to."""

    file_name: str
    sha256: str
    env_var: str
    urls: tuple[str, ...]  # tried in order; a ``.zip`` URL is opened and ``file_name`` read from it


DATA_FILES: dict[str, DataFileSpec] = {
    "forestfires": DataFileSpec(
        file_name="forestfires.csv",
        sha256="0d6586a1fa52f55bef48578aef14eb97273f1e9330e1a53423df497a77065253",
        env_var="VFL_FORESTFIRES",
        urls=(
            "https://archive.ics.uci.edu/ml/machine-learning-databases/forest-fires/forestfires.csv",
            "https://archive.ics.uci.edu/static/public/162/forest+fires.zip",
        ),
    ),
    "garment": DataFileSpec(
        file_name="garments_worker_productivity.csv",
        sha256="763ffcdd39b7f7f360243c2af8f89ed733e8b5f9e511efeb0c886b83e1b76866",
        env_var="VFL_GARMENT",
        urls=(
            "https://archive.ics.uci.edu/ml/machine-learning-databases/00597/garments_worker_productivity.csv",
            "https://archive.ics.uci.edu/static/public/597/productivity+prediction+of+garment+employees.zip",
        ),
    ),
}


@dataclass
class Dataset:
    """A preprocessed regression data set and its vertical split.

    ``X`` holds the global feature order (party A's columns, then party B's), ``party_columns`` maps a
    party name to its feature names (the first party holds the label), ``scaling`` maps a z-scored
    feature to the (mean, sd) used, and ``coef`` is the true coefficient vector for synthetic data.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    target_name: str
    party_columns: dict[str, list[str]]
    scaling: dict[str, tuple[float, float]] = field(default_factory=dict)
    coef: np.ndarray | None = None

    def column_indices(self, names: Sequence[str]) -> list[int]:
        """Positions of ``names`` in ``feature_names`` (DataValidationError for an unknown name)."""
        index = {name: i for i, name in enumerate(self.feature_names)}
        missing = [n for n in names if n not in index]
        if missing:
            raise DataValidationError(f"{self.name}: unknown feature(s) {missing}")
        return [index[n] for n in names]

    def party_blocks(self) -> list[np.ndarray]:
        """The column blocks X^(1), ..., X^(k) in party order (the label owner first)."""
        return [self.X[:, self.column_indices(cols)] for cols in self.party_columns.values()]


# ---------------------------------------------------------------------------------------------------
# Locating, downloading and verifying the raw files


def sha256_of(data: bytes) -> str:
    """Hex sha256 digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _repo_shared_data_dir() -> Path:
    """``../shared/data`` next to the repository (the repository is the parent of the ``vfl`` package)."""
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/vfl`` if that variable is set, else ``~/.cache/vfl``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vfl"


def _urlopen_bytes(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (http(s) or file URLs only)
        return response.read()


def _verify(data: bytes, spec: DataFileSpec, origin: str) -> None:
    digest = sha256_of(data)
    if digest != spec.sha256:
        raise DataValidationError(
            f"{spec.file_name} from {origin} has sha256 {digest}, expected {spec.sha256}"
        )


def _download(spec: DataFileSpec, urls: Sequence[str], opener: Opener) -> bytes:
    """First URL whose bytes (or zip member ``spec.file_name``) verify; DataValidationError otherwise."""
    failures: list[str] = []
    for url in urls:
        try:
            payload = opener(url)
        except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError; a broken reply is not
            failures.append(f"{url}: {exc}")
            continue
        if url.endswith(".zip"):
            try:
                with zipfile.ZipFile(io.BytesIO(payload)) as archive:
                    member = next(n for n in archive.namelist() if n.rsplit("/", 1)[-1] == spec.file_name)
                    payload = archive.read(member)
            except (zipfile.BadZipFile, StopIteration):
                failures.append(f"{url}: no {spec.file_name} in the archive")
                continue
        _verify(payload, spec, url)  # a wrong checksum is an error, never silently skipped
        return payload
    raise DataValidationError(f"could not download {spec.file_name}: " + "; ".join(failures))


def resolve_data_file(
    name: str,
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    urls: Sequence[str] | None = None,
    opener: Opener | None = None,
    verify: bool = True,
) -> Path:
    """Find (or fetch) the raw file of data set ``name`` ('forestfires' or 'garment') and check its sha256.

    Order: ``path``; env var ``VFL_FORESTFIRES``/``VFL_GARMENT`` (a file) or ``VFL_DATA_DIR`` (a
    directory); ``../shared/data`` next to the repository; the user cache (``cache_dir`` or
    :func:`default_cache_dir`); else download ``urls`` (default: the UCI archive) with ``opener``
    (default: ``urllib``), verify, and store atomically in the cache. A checksum mismatch raises
    :class:`DataValidationError` (pass ``verify=False`` for a deliberately modified local copy).
    """
    if name not in DATA_FILES:
        raise DataValidationError(f"unknown data set {name!r}; known: {sorted(DATA_FILES)}")
    spec = DATA_FILES[name]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    candidates: list[Path] = []
    if path is not None:
        candidates.append(Path(path))
    elif os.environ.get(spec.env_var):
        candidates.append(Path(os.environ[spec.env_var]))
    elif os.environ.get("VFL_DATA_DIR"):
        candidates.append(Path(os.environ["VFL_DATA_DIR"]) / spec.file_name)
    else:
        candidates += [_repo_shared_data_dir() / spec.file_name, cache / spec.file_name]
    explicit = path is not None or bool(os.environ.get(spec.env_var) or os.environ.get("VFL_DATA_DIR"))
    for candidate in candidates:
        if candidate.is_file():
            if verify:
                _verify(candidate.read_bytes(), spec, str(candidate))
            return candidate
    if explicit:
        raise DataValidationError(f"{name}: no file at {candidates[0]}")
    payload = _download(spec, urls if urls is not None else spec.urls, opener or _urlopen_bytes)
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / spec.file_name
    tmp = target.with_suffix(target.suffix + f".part{os.getpid()}")
    tmp.write_bytes(payload)
    os.replace(tmp, target)
    return target


# ---------------------------------------------------------------------------------------------------
# Generic numeric CSV for parties


def load_csv_table(path: str | os.PathLike[str]) -> tuple[list[str], np.ndarray]:
    """Read a numeric CSV with a header row into ``(column_names, float array of shape (rows, columns))``.

    Every cell must parse as a finite float; otherwise :class:`DataValidationError` names the column
    and the data row (1-based, header excluded) of the first bad cell.
    """
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise DataValidationError(f"{path}: empty file, expected a header row") from None
        if len(set(header)) != len(header) or any(h == "" for h in header):
            raise DataValidationError(f"{path}: column names must be non-empty and unique, got {header}")
        rows: list[list[float]] = []
        for row_number, row in enumerate(reader, start=1):
            if not row:
                continue
            if len(row) != len(header):
                raise DataValidationError(
                    f"{path}: data row {row_number} has {len(row)} cells, the header has {len(header)}"
                )
            values = []
            for column, cell in zip(header, row, strict=True):
                try:
                    value = float(cell)
                except ValueError:
                    raise DataValidationError(
                        f"{path}: column {column!r}, data row {row_number}: {cell!r} is not a number"
                    ) from None
                if not math.isfinite(value):
                    raise DataValidationError(
                        f"{path}: column {column!r}, data row {row_number}: {cell!r} is not finite"
                    )
                values.append(value)
            rows.append(values)
    if not rows:
        raise DataValidationError(f"{path}: no data rows")
    return header, np.asarray(rows, dtype=float)


# ---------------------------------------------------------------------------------------------------
# Preprocessing helpers


def _read_records(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _numeric(records: list[dict[str, str]], column: str) -> np.ndarray:
    try:
        return np.array([float(r[column]) for r in records])
    except ValueError as exc:
        raise DataValidationError(f"column {column!r}: {exc}") from None


def _dummies(records: list[dict[str, str]], column: str, levels: list[str]) -> tuple[list[str], np.ndarray]:
    """0/1 columns for ``levels[1:]`` (the first level is the dropped reference)."""
    kept = levels[1:]
    values = np.array([[1.0 if r[column] == level else 0.0 for level in kept] for r in records])
    return [f"{column}_{level}" for level in kept], values


def _zscore(values: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    return (values - mean) / sd, (mean, sd)


# ---------------------------------------------------------------------------------------------------
# The three data sets

FOREST_CONTINUOUS_A = ("temp", "RH", "wind", "rain")
FOREST_PARTY_B = ("FFMC", "DMC", "DC", "ISI")


def forest_fires(path: str | os.PathLike[str] | None = None) -> Dataset:
    """UCI forest fires, preprocessed as de Jong et al. (2022, Sec. 3.3) / van Kesteren et al. (2019).

    517 rows; 27 features (A: 23, B: 4); y = log(area + 1); continuous columns z-scored with ddof=1.
    """
    records = _read_records(resolve_data_file("forestfires", path))
    columns: dict[str, np.ndarray] = {}
    scaling: dict[str, tuple[float, float]] = {}

    def add_scaled(name: str) -> None:
        columns[name], scaling[name] = _zscore(_numeric(records, name))

    add_scaled("X")
    add_scaled("Y")
    for categorical in ("month", "day"):
        levels = list(dict.fromkeys(r[categorical] for r in records))  # order of appearance: mar, fri first
        names, values = _dummies(records, categorical, levels)
        columns.update({n: values[:, j] for j, n in enumerate(names)})
    for name in FOREST_CONTINUOUS_A + FOREST_PARTY_B:
        add_scaled(name)
    party_a = [n for n in columns if n not in FOREST_PARTY_B]
    party_b = list(FOREST_PARTY_B)
    feature_names = party_a + party_b
    return Dataset(
        name="forestfires",
        X=np.column_stack([columns[n] for n in feature_names]),
        y=np.log(_numeric(records, "area") + 1.0),
        feature_names=feature_names,
        target_name="log_area",
        party_columns={"A": party_a, "B": party_b},
        scaling=scaling,
    )


GARMENT_NUMERIC_A = ("team", "targeted_productivity", "smv", "over_time", "incentive")
GARMENT_NUMERIC_B = ("idle_time", "idle_men", "no_of_style_change", "no_of_workers")


def garment(path: str | os.PathLike[str] | None = None) -> Dataset:
    """UCI garment worker productivity, preprocessed as de Jong et al. (2022, Sec. 3.3).

    1197 rows; 17 features (A: 11, B: 6); y = actual_productivity; no scaling; quirks kept
    (``sweing``, ``finishing `` with a trailing space, no Friday, Quarter5).
    """
    records = _read_records(resolve_data_file("garment", path))
    quarter_levels = sorted({r["quarter"] for r in records})
    quarter = np.array([float(quarter_levels.index(r["quarter"])) for r in records])
    day_names, day_values = _dummies(records, "day", sorted({r["day"] for r in records}))
    dept_names, dept_values = _dummies(records, "department", sorted({r["department"] for r in records}))
    party_a = ["quarter", *GARMENT_NUMERIC_A, *day_names]
    party_b = [*GARMENT_NUMERIC_B, *dept_names]
    X = np.column_stack(
        [quarter]
        + [_numeric(records, c) for c in GARMENT_NUMERIC_A]
        + [day_values]
        + [_numeric(records, c) for c in GARMENT_NUMERIC_B]
        + [dept_values]
    )
    return Dataset(
        name="garment",
        X=X,
        y=_numeric(records, "actual_productivity"),
        feature_names=party_a + party_b,
        target_name="actual_productivity",
        party_columns={"A": party_a, "B": party_b},
    )


def synthetic(
    n: int,
    d: int,
    *,
    correlation: float = 0.0,
    r2: float = 0.5,
    random_state: RandomState = None,
) -> Dataset:
    """Synthetic data of de Jong et al. (2022, Sec. 3.2).

    Rows x ~ N(0, Sigma) with Sigma = (1 - rho) I + rho 11^T (equicorrelated standard normal
    predictors), beta ~ N(2, 1.5^2) per coordinate, y = X beta + e with e ~ N(0, s^2) and
    s^2 = beta^T Sigma beta (1 - R^2)/R^2, so the population R^2 equals ``r2``. Party A gets the first
    ceil(d/2) columns and the label, party B the rest.
    """
    if n < 2 or d < 2:
        raise DataValidationError(f"synthetic data need n >= 2 and d >= 2, got n={n}, d={d}")
    if not -1.0 / (d - 1) < correlation < 1.0:
        raise DataValidationError(f"correlation must lie in (-1/(d-1), 1) for a valid covariance, got {correlation}")
    if not 0.0 < r2 < 1.0:
        raise DataValidationError(f"r2 must lie in (0, 1), got {r2}")
    rng = make_rng(random_state)
    sigma = (1.0 - correlation) * np.eye(d) + correlation * np.ones((d, d))
    X = rng.standard_normal((n, d)) @ np.linalg.cholesky(sigma).T
    beta = rng.normal(2.0, 1.5, size=d)
    noise_sd = math.sqrt(float(beta @ sigma @ beta) * (1.0 - r2) / r2)
    y = X @ beta + rng.normal(0.0, noise_sd, size=n)
    names = [f"x{j}" for j in range(d)]
    half = (d + 1) // 2
    return Dataset(
        name="synthetic",
        X=X,
        y=y,
        feature_names=names,
        target_name="y",
        party_columns={"A": names[:half], "B": names[half:]},
        coef=beta,
    )


# ---------------------------------------------------------------------------------------------------
# Public bounds for the functional-mechanism comparison

#: Raw-column domains stated in the UCI documentation ``forestfires.names`` (Cortez & Morais 2007),
#: attribute list, items 1-13. **Not independent of the data**: every documented range is exactly the
#: file's own min and max (the authors documented their data), so these bounds are public constants but
#: were read off these 517 rows. See :data:`BOUNDS_PROVENANCE`.
FOREST_RAW_BOUNDS: dict[str, tuple[float, float]] = {
    "X": (1.0, 9.0),
    "Y": (2.0, 9.0),
    "FFMC": (18.7, 96.2),
    "DMC": (1.1, 291.3),
    "DC": (7.9, 860.6),
    "ISI": (0.0, 56.1),
    "temp": (2.2, 33.3),
    "RH": (15.0, 100.0),
    "wind": (0.4, 9.4),
    "rain": (0.0, 6.4),
    "area": (0.0, 1090.84),
}

#: Garment domains. Source per column in GARMENT_BOUND_SOURCES: the UCI page of data set 597
#: documents actual_productivity in [0, 1] (the file has values up to 1.12, which FM clips). It says
#: "a month was divided into four quarters" and gives no team count, so ``quarter`` in [0, 4] and
#: ``team`` in [1, 12] are **the file's own ranges** (data-derived). The other columns have no
#: documented range: their bounds are *declared analyst assumptions* from the meaning of the column
#: (working minutes in a day, team sizes of a factory line), set above the data maxima.
GARMENT_RAW_BOUNDS: dict[str, tuple[float, float]] = {
    "quarter": (0.0, 4.0),
    "team": (1.0, 12.0),
    "targeted_productivity": (0.0, 1.0),
    "smv": (0.0, 60.0),
    "over_time": (0.0, 30000.0),
    "incentive": (0.0, 5000.0),
    "idle_time": (0.0, 480.0),
    "idle_men": (0.0, 100.0),
    "no_of_style_change": (0.0, 5.0),
    "no_of_workers": (0.0, 100.0),
    "actual_productivity": (0.0, 1.0),
}

GARMENT_BOUND_SOURCES: dict[str, str] = {
    "quarter": "DATA-DERIVED: the UCI doc says four quarters, the file codes Quarter1..Quarter5 -> 0..4",
    "team": "DATA-DERIVED: the UCI doc gives no team count; 1..12 is the file's range",
    "targeted_productivity": "declared assumption: a productivity target, a fraction in [0, 1]",
    "smv": "declared assumption: standard minute value of one task, at most one hour",
    "over_time": "declared assumption: overtime minutes of a team per day, at most 30000",
    "incentive": "declared assumption: incentive in BDT, at most 5000",
    "idle_time": "declared assumption: idle minutes, at most one 8-hour shift",
    "idle_men": "declared assumption: idle workers, at most a full line of 100",
    "no_of_style_change": "declared assumption: at most 5 style changes",
    "no_of_workers": "declared assumption: at most 100 workers per team",
    "actual_productivity": "UCI doc: 'It ranges from 0-1'",
}


#: One line per data set saying where the FM comparison's bounds come from, and which of them are
#: derived from the data (printed in the examples' tables and in docs/benchmarks_real_data.md).
BOUNDS_PROVENANCE: dict[str, str] = {
    "forestfires": (
        "FM bounds: the ranges in the UCI forestfires.names, which are exactly this file's min/max (public "
        "but read off the data); the z-scored features' bounds use the data's own mean/sd, which cancels in "
        "the FM release (identical to raw columns with the raw bounds; tests/test_datasets.py)"
    ),
    "garment": (
        "FM bounds: actual_productivity in [0, 1] from the UCI page (values up to 1.12 are clipped); "
        "quarter [0, 4] and team [1, 12] are the file's own ranges (data-derived); the other columns use "
        "declared analyst assumptions above the data maxima (vfl.data.datasets.GARMENT_BOUND_SOURCES)"
    ),
}


def public_bounds(
    name: str, *, space: str = "features", dataset: Dataset | None = None
) -> dict[str, tuple[float, float]]:
    """Declared column domains for data set ``name`` ('forestfires' or 'garment'), keyed by column.

    ``space="raw"`` gives the documented bounds of the raw CSV columns (see :data:`FOREST_RAW_BOUNDS`,
    :data:`GARMENT_RAW_BOUNDS` and :data:`GARMENT_BOUND_SOURCES` for where each number comes from).
    ``space="features"`` maps them to the preprocessed features of :func:`forest_fires` /
    :func:`garment`: dummies (0, 1); z-scored columns (lo - mean)/sd, (hi - mean)/sd with the data's own
    mean and sd; the target under its ``target_name`` (forest fires: log(area + 1) in [0, log(1091.84)]).
    ``dataset`` is the loaded data set (loaded if omitted).

    The mean/sd are data-derived (as is the paper's z-scoring itself), but they cancel in the FM release:
    FM maps a column to [-1, 1] by the affine map of its bounds, and z-scoring composed with that map
    is the raw column's map, x' = (2x - lo - hi)/(hi - lo). So an FM fit on the z-scored features with
    these bounds releases exactly what a fit on the raw columns with the raw bounds releases (tested);
    only reading the coefficients on the z-scale uses mean/sd. Which raw bounds are themselves
    data-derived is stated in :data:`BOUNDS_PROVENANCE`.
    """
    if space not in ("raw", "features"):
        raise DataValidationError(f"space must be 'raw' or 'features', got {space!r}")
    if name == "forestfires":
        raw = dict(FOREST_RAW_BOUNDS)
        if space == "raw":
            return raw
        data = dataset if dataset is not None else forest_fires()
        bounds = {}
        for feature in data.feature_names:
            if feature in data.scaling:
                mean, sd = data.scaling[feature]
                lo, hi = raw[feature]
                bounds[feature] = ((lo - mean) / sd, (hi - mean) / sd)
            else:
                bounds[feature] = (0.0, 1.0)
        lo, hi = raw["area"]
        bounds[data.target_name] = (math.log(lo + 1.0), math.log(hi + 1.0))
        return bounds
    if name == "garment":
        raw = dict(GARMENT_RAW_BOUNDS)
        if space == "raw":
            return raw
        data = dataset if dataset is not None else garment()
        bounds = {f: raw.get(f, (0.0, 1.0)) for f in data.feature_names}
        bounds[data.target_name] = raw["actual_productivity"]
        return bounds
    raise DataValidationError(f"no public bounds for data set {name!r}; known: forestfires, garment")
