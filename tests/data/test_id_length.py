"""A party's row-ID column is bounded: no ID longer than ``MAX_ID_CHARS`` (256) characters (vfl.data.id_column).

Invariant: a party holds its IDs as one fixed-width array as wide as the longest ID, so one long ID widened every
row (10^7 rows x 4096 characters: ~160 GB). Now the array is at most N x 4 x MAX_ID_CHARS bytes: an ID over the
bound is refused as the column is read (one line naming the data row, never the ID, exit 2, no file written).
Attacker: whoever writes a party's table (or a `vfl predict` input) -- one cell of 4096 characters, which main
(bbf5d54) accepted (its only bound was 4096 characters after normalisation).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli_data_files import _one_error, _run, files  # noqa: F401  (the `files` fixture)
from vfl.data.id_column import MAX_ID_CHARS, IdColumn
from vfl.exceptions import DataValidationError
from vfl.protocols.psi_stream import id_array

ROOT = Path(__file__).resolve().parents[2]
LONG = "x" * 4096


def test_an_id_over_the_bound_is_refused_naming_its_row_and_the_array_stays_bounded():
    ok = IdColumn.from_cells(iter(["a", "é" * MAX_ID_CHARS, "c"]))
    assert isinstance(ok, IdColumn) and ok.data.dtype.itemsize <= 4 * MAX_ID_CHARS and ok[1] == "é" * MAX_ID_CHARS
    with pytest.raises(DataValidationError) as err:
        IdColumn.from_cells(iter(["a", "b", LONG, "d"]))
    assert f"longer than {MAX_ID_CHARS} characters in data row 3" in str(err.value) and "xxx" not in str(err.value)
    with pytest.raises(DataValidationError, match="data row 2"):   # IDs given in Python (ids=): the same bound
        id_array(["a", "y" * (MAX_ID_CHARS + 1)])


def test_the_docs_state_the_bound():
    assert MAX_ID_CHARS == 256
    assert "longer than 256 characters" in (ROOT / "docs" / "psi.md").read_text()
    assert "at most 256 characters" in (ROOT / "docs" / "data_preparation.md").read_text()


def test_a_party_process_refuses_a_long_id_in_one_line_before_connecting(tmp_path):
    """A real `vfl party`: on main it accepted the table and went on to wait for its coordinator (nothing listens
    here, so it failed only after its --timeout, with another line)."""
    from vfl.demo import make_demo_data

    data = make_demo_data(tmp_path / "data", 50, seed=3)
    lines = data["bob"].read_text().splitlines()
    lines[3] = LONG + lines[3][lines[3].index(","):]
    data["bob"].write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "vfl.cli", "party", "--connect", "tcp://127.0.0.1:1", "--name", "bob",
                           "--data", str(data["bob"]), "--features", "visits,spend", "--id", "id", "--bounds",
                           str(data["bounds"]), "--no-progress", "--timeout", "30", "--insecure-test-keys",
                           "--insecure-no-identity"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc
    line = _one_error(proc.stderr)
    assert f"row ID longer than {MAX_ID_CHARS} characters in data row 3" in line and "xxx" not in line, line


def test_predict_refuses_a_long_id_and_writes_no_file(tmp_path, capsys, files):  # noqa: F811
    model, data = files
    data.write_text(data.read_text().replace("u2,", LONG + ","))
    out = tmp_path / "pred.csv"
    code, stdout, err = _run(capsys, "predict", "--model", model, "--data", data, "--id", "id", "--out", out)
    assert code == 2 and stdout == "" and "data row 2" in _one_error(err) and not out.exists()
