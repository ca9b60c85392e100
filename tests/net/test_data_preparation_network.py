"""Declared preprocessing end to end (issue 21 items 1, 10, 11): real `vfl coordinator` / `vfl party` processes.

Alice holds a categorical column (declared categories, inline in her config file with her bounds) and the label; Bob
holds a column with missing cells (a declared public constant imputes them, in his bounds file). After training,
`vfl predict` on the raw joined CSV gives the model applied to the preprocessed matrix, with the row IDs passed
through. Fast keys: 1024-bit Paillier (--insecure-test-keys), INSECURE, only to keep the suite fast.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from vfl.demo import free_port
from vfl.models.modelio import load_model

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

VFL = [sys.executable, "-m", "vfl.cli"]

COLOURS = ["red", "green", "blue"]
IMPUTE = 50.0


def _data(tmp_path, rows=160, seed=5):
    rng = np.random.default_rng(seed)
    age = np.round(rng.uniform(18, 90, rows), 2)
    colour = rng.choice(COLOURS, rows)
    income = np.round(rng.uniform(0, 100, rows), 2)
    missing = rng.random(rows) < 0.15
    visits = np.round(rng.uniform(0, 20, rows), 2)
    dummies = (colour[:, None] == np.array(COLOURS)).astype(float)
    income_in = np.where(missing, IMPUTE, income)
    prepared = np.column_stack([age, dummies, income_in, visits])
    y = np.round(prepared @ np.array([0.05, 2.0, 0.5, -1.0, 0.03, 0.1]) + 0.3 * rng.normal(size=rows), 4)
    ids = [f"p{i:04d}" for i in range(rows)]
    income_cells = ["" if m else f"{v:g}" for v, m in zip(income, missing, strict=True)]
    files = {"alice": tmp_path / "alice.csv", "bob": tmp_path / "bob.csv", "joined": tmp_path / "joined.csv"}
    files["alice"].write_text("id,age,colour,y\n" + "".join(
        f"{i},{a:g},{c},{v:g}\n" for i, a, c, v in zip(ids, age, colour, y, strict=True)))
    files["bob"].write_text("id,income,visits\n" + "".join(
        f"{i},{m},{v:g}\n" for i, m, v in zip(ids, income_cells, visits, strict=True)))
    files["joined"].write_text("id,visits,colour,income,age\n" + "".join(
        f"{i},{v:g},{c},{m},{a:g}\n" for i, v, c, m, a in zip(ids, visits, colour, income_cells, age, strict=True)))
    return files, prepared, y, ids


def test_categorical_and_imputed_columns_train_and_predict_on_raw_rows(procs, tmp_path):
    files, prepared, y, ids = _data(tmp_path)
    url = f"tcp://127.0.0.1:{free_port()}"
    alice_cfg = tmp_path / "alice.toml"
    alice_cfg.write_text(f'[party]\nname = "alice"\nconnect = "{url}"\ndata = "alice.csv"\n'
                         'features = ["age", "colour"]\nlabel = "y"\nrows_aligned = true\n\n'
                         '[bounds]\nage = [18, 90]\ny = [-10, 20]\n\n[categories]\ncolour = ["red", "green", "blue"]\n')
    bob_bounds = tmp_path / "bob_bounds.toml"
    bob_bounds.write_text(f"[bounds]\nincome = [0, 100]\nvisits = [0, 20]\n\n[impute]\nincome = {IMPUTE:g}\n")
    out = tmp_path / "model.json"
    party_opts = ["--no-progress", "--timeout", "60", "--insecure-test-keys", "--allow-mechanisms", "none"]
    c = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                    "--insecure-test-keys", "--timeout", "60", "--mechanism", "none", "--precision-bits", "32",
                    "--no-fit-intercept")
    a = procs.start("party", "--config", str(alice_cfg), *party_opts)
    b = procs.start("party", "--connect", url, "--name", "bob", "--data", str(files["bob"]), "--features",
                    "income,visits", "--bounds", str(bob_bounds), *party_opts)
    code, stdout, err = procs.finish(c, timeout=240)
    assert code == 0, err
    for p in (a, b):
        rc, _, perr = procs.finish(p, timeout=60)
        assert rc == 0, perr

    doc = json.loads(out.read_text())
    names = ["age", "colour=red", "colour=green", "colour=blue", "income", "visits"]
    assert doc["features"] == names and list(doc["coefficients"]) == names and doc["label"] == "y"
    alice, bob = doc["parties"]
    assert alice["preprocessing"] == {"inputs": ["age", "colour"], "categories": {"colour": COLOURS}, "impute": {}}
    assert bob["preprocessing"] == {"inputs": ["income", "visits"], "categories": {}, "impute": {"income": IMPUTE}}
    # the inline bounds were used (not the data's min/max): without intercept the model keeps (-m, m)
    assert alice["bounds"][0] == [-90.0, 90.0] and alice["bounds"][1:] == [[-1.0, 1.0]] * 3
    # the parties trained on the prepared matrix: mechanism none is least squares on it (through the origin)
    ref = np.linalg.lstsq(prepared, y, rcond=None)[0]
    np.testing.assert_allclose(doc["coef"], ref, rtol=0, atol=1e-5)

    res = subprocess.run([*VFL, "predict", "--model", str(out), "--data", str(files["joined"]), "--id", "id"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == ["id", "y_predicted"] and [r[0] for r in rows[1:]] == ids
    pred = np.array([float(r[1]) for r in rows[1:]])
    np.testing.assert_allclose(pred, load_model(out).predict(prepared), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(pred, prepared @ ref, atol=1e-3)
