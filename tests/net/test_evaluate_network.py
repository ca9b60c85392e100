"""Held-out evaluation through the scoring protocol (issue 31).

End to end with real processes: a networked training run with ``--release-beta`` (coordinator + two parties), `vfl
report` (R^2 and MSE with intervals from the release) and `vfl report --html` in a headless browser, then `vfl
evaluate` -- the label owner as the scoring hub, both parties `vfl serve` their held-out rows -- whose metrics file
equals numpy on the joined test rows. Fast: a logistic model scored over the real protocol on loopback
(``vfl.score``) and evaluated; bad label files refused in one line before anyone is contacted.

FAST TEST keys: 1024-bit INSECURE Paillier test keys.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from vfl.demo import free_port, make_demo_data

pytestmark = [pytest.mark.network, pytest.mark.timeout(900)]   # outer limit (loaded machine); good runs end sooner
VFL = [sys.executable, "-m", "vfl.cli"]
GENEROUS = "300"
N_TRAIN, N_TEST = 1200, 300


def _vfl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*VFL, *args], capture_output=True, text=True, timeout=600)


def _split(path, tmp_path, name: str, drop: set[str] = frozenset()) -> tuple[list[str], list[list[str]]]:
    """Write NAME_train.csv (the first N_TRAIN rows) and NAME_test.csv (the rest, minus the IDs in ``drop``)."""
    rows = list(csv.reader(path.open()))
    header, body = rows[0], rows[1:]
    with (tmp_path / f"{name}_train.csv").open("w", newline="") as f:
        csv.writer(f).writerows([header, *body[:N_TRAIN]])
    test = [r for r in body[N_TRAIN:] if r[0] not in drop]
    with (tmp_path / f"{name}_test.csv").open("w", newline="") as f:
        csv.writer(f).writerows([header, *test])
    return header, body[N_TRAIN:]


@pytest.mark.slow
def test_train_report_html_browser_and_held_out_evaluation_through_the_scoring_protocol(procs, tmp_path,
                                                                                        identity_dir):
    from helpers.browser import load_page

    data = make_demo_data(tmp_path / "data", N_TRAIN + N_TEST, seed=7)
    a_head, a_test = _split(data["alice"], tmp_path, "alice")
    lost = a_test[5][0]                       # bob does not hold this test ID: reported missing, left out
    b_head, b_test = _split(data["bob"], tmp_path, "bob", drop={lost})
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                        "--insecure-test-keys", "--epsilon", "4", "--release-beta", "--timeout", GENEROUS)
    common = ["--connect", url, "--bounds", str(data["bounds"]), "--no-progress", "--insecure-test-keys",
              "--timeout", GENEROUS]
    alice = procs.start("party", "--name", "alice", "--data", str(tmp_path / "alice_train.csv"),
                        "--features", "age,income,tenure", "--label", "score", "--ledger", str(tmp_path / "a.sqlite"),
                        *common)
    bob = procs.start("party", "--name", "bob", "--data", str(tmp_path / "bob_train.csv"),
                      "--features", "visits,spend", "--ledger", str(tmp_path / "b.sqlite"), *common)
    code, stdout, err = procs.finish(coord, timeout=600)
    assert code == 0, err[-2000:]
    assert [procs.finish(p)[0] for p in (alice, bob)] == [0, 0]
    doc = json.loads(out.read_text())
    fit = doc["inference"]["fit"]          # y'y released: R^2 and MSE with their intervals in the model file
    assert fit["r2"] is not None and fit["mse"] is not None and len(fit["r2_conf_int"]) == 2
    assert "tau_beta" in doc["privacy_report"]["noise_scales"]

    text = _vfl("report", str(out), "--ledger", str(tmp_path / "a.sqlite"))
    assert text.returncode == 0, text.stderr
    assert re.search(r"^\s+r2: \S+\s+\[\S+, \S+\]$", text.stdout, re.M), text.stdout
    assert re.search(r"^\s+mse: \S+\s+\[\S+, \S+\]$", text.stdout, re.M), text.stdout
    page_path = tmp_path / "report.html"
    made = _vfl("report", str(out), "--html", str(page_path), "--seed", "3")
    assert made.returncode == 0 and page_path.exists(), made.stderr
    page = load_page(page_path, tmp_path)
    assert page.console_errors == [], page.console_errors
    cells = re.findall(r"<td>([^<]*)</td>", page.dom)
    assert all(name in cells for name in [*doc["features"], "intercept"]), cells[:20]
    assert "r2:" in page.dom and "mse:" in page.dom

    # held-out evaluation: the label owner is the scoring hub; its labels file holds the test IDs and labels
    labels = tmp_path / "test_labels.csv"
    score_col = a_head.index("score")
    labels.write_text("id,score\n" + "".join(f"{r[0]},{r[score_col]}\n" for r in a_test))
    hub_url, metrics = f"tcp://127.0.0.1:{free_port()}", tmp_path / "metrics.json"
    hub = procs.start("evaluate", "--model", str(out), "--labels", str(labels), "--out", str(metrics),
                      "--bind", hub_url, "--identity-dir", str(identity_dir), "--timeout", GENEROUS)
    servers = [procs.start("serve", "--model", str(out), "--connect", hub_url, "--name", name, "--data",
                           str(tmp_path / f"{name}_test.csv"), "--id", "id", "--identity-dir", str(identity_dir),
                           "--timeout", GENEROUS) for name in ("alice", "bob")]
    code, stdout, err = procs.finish(hub, timeout=600)
    assert code == 0, err[-2000:]
    assert [procs.finish(p)[0] for p in servers] == [0, 0]
    assert f"{N_TEST - 1} of {N_TEST} test IDs scored (1 missing" in stdout
    record = json.loads(metrics.read_text())
    assert (record["n_queried"], record["n_scored"], record["n_missing"]) == (N_TEST, N_TEST - 1, 1)

    # numpy on the joined test rows (inside the public bounds: no clipping), without the missing ID
    bob_rows = {r[0]: r for r in b_test}
    keep = [r for r in a_test if r[0] != lost]
    feats = {"age": a_head, "income": a_head, "tenure": a_head, "visits": b_head, "spend": b_head}
    X = np.array([[float((r if feats[f] is a_head else bob_rows[r[0]])[feats[f].index(f)]) for f in doc["features"]]
                  for r in keep])
    y = np.array([float(r[score_col]) for r in keep])
    pred = X @ np.asarray(doc["coef"]) + doc["intercept"]
    m = record["metrics"]
    assert m["mse"] == pytest.approx(np.mean((y - pred) ** 2), rel=1e-6)
    assert m["mae"] == pytest.approx(np.mean(np.abs(y - pred)), rel=1e-6)
    assert m["r2"] == pytest.approx(1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2), rel=1e-6, abs=1e-9)
    assert "MSE" in stdout and "R^2" in stdout and "not differentially private" in stdout

    # the same evaluation released with differential privacy, charged to the label owner's ledger
    ledger, private = tmp_path / "a.sqlite", tmp_path / "private.json"
    hub_url = f"tcp://127.0.0.1:{free_port()}"
    hub = procs.start("evaluate", "--model", str(out), "--labels", str(labels), "--out", str(private),
                      "--bind", hub_url, "--identity-dir", str(identity_dir), "--timeout", GENEROUS,
                      "--dp-epsilon", "1", "--ledger", str(ledger))
    servers = [procs.start("serve", "--model", str(out), "--connect", hub_url, "--name", name, "--data",
                           str(tmp_path / f"{name}_test.csv"), "--id", "id", "--identity-dir", str(identity_dir),
                           "--timeout", GENEROUS) for name in ("alice", "bob")]
    code, stdout, err = procs.finish(hub, timeout=600)
    assert code == 0, err[-2000:]
    assert [procs.finish(p)[0] for p in servers] == [0, 0]
    dp = json.loads(private.read_text())
    assert dp["differentially_private"] and dp["privacy"]["epsilon"] == 1.0 and dp["privacy"]["ledger"] == str(ledger)
    noise = dp["metrics"]["noise_std"]["mse"]
    assert abs(dp["metrics"]["mse"] - m["mse"]) <= 6 * noise        # the exact value within 6 noise std
    from vfl.privacy.ledger import Ledger

    runs = [r for r in Ledger(ledger).runs() if r.run_id.startswith("evaluate-")]
    assert len(runs) == 1 and runs[0].state == "completed" and runs[0].epsilon == 1.0


def test_logistic_held_out_evaluation_through_the_scoring_protocol(fast_insecure_keys) -> None:
    """Train over the network (vfl.fit, parties with IDs), score the held-out IDs over the real scoring protocol
    (vfl.score, loopback) and evaluate: accuracy, AUC, log-loss and the calibration table equal numpy's on the
    model's own probabilities of the joined test rows, and a test ID one party lacks is left out."""
    from vfl import Party, fit, score
    from vfl.models.evaluation import evaluate_scores

    rng = np.random.default_rng(11)
    n, n_test = 1500, 300
    X = rng.uniform(-1, 1, (n, 4))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ [2.0, -1.5, 1.0, 0.5])))).astype(float)
    ids = [f"u{i:05d}" for i in range(n)]
    tr, te = slice(0, n - n_test), slice(n - n_test, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = fit([Party("alice", X[tr, :2], y[tr], bounds=(-1.0, 1.0), ids=ids[tr]),
                     Party("bob", X[tr, 2:], bounds=(-1.0, 1.0), ids=ids[tr])],
                     model="logistic", epsilon=4.0, timeout=120, **fast_insecure_keys)
        test_ids = ids[te]
        bob_ids = test_ids[1:]                               # bob lacks the first test ID
        scores = score([Party("alice", X[te, :2], bounds=(-1.0, 1.0), ids=test_ids),
                        Party("bob", X[te, 2:][1:], bounds=(-1.0, 1.0), ids=bob_ids)], model, test_ids)
    rec = evaluate_scores("logistic", y[te], scores.value, scores.missing, bins=5)
    assert (rec["n_scored"], rec["n_missing"]) == (n_test - 1, 1)
    p = 1 / (1 + np.exp(-(X[te][1:] @ model.coef_ + model.intercept_)))
    yt = y[te][1:]
    m = rec["metrics"]
    assert m["accuracy"] == pytest.approx(np.mean((p >= 0.5) == (yt == 1)), abs=1e-12)
    assert m["log_loss"] == pytest.approx(-np.mean(yt * np.log(p) + (1 - yt) * np.log(1 - p)), rel=1e-8)
    pairs = (p[yt == 1][:, None] > p[yt == 0][None, :]).mean() + 0.5 * (p[yt == 1][:, None] == p[yt == 0]).mean()
    assert m["auc"] == pytest.approx(pairs, abs=1e-9)
    assert m["auc"] > 0.5                                     # a signal this strong is learned at epsilon 4
    counts = np.histogram(p, bins=5, range=(0.0, 1.0))[0]
    assert [b["count"] for b in m["calibration"]] == list(counts)


def test_a_dp_evaluation_over_the_budget_is_refused_before_anyone_is_contacted(tmp_path) -> None:
    from vfl.models.modelio import FittedModel, PartyColumns

    parties = [PartyColumns("alice", ["a"], [[-1.0, 1.0]], label_owner=True, intercept=True),
               PartyColumns("bob", ["b"], [[-1.0, 1.0]])]
    FittedModel("linear", "gaussian-fm", parties, np.array([0.5, 0.1, 0.25]), [-1.0, 1.0],
                label_name="score").to_json(tmp_path / "model.json")
    (tmp_path / "labels.csv").write_text("id,score\nr1,0.5\nr2,-0.5\n")
    done = _vfl("evaluate", "--model", str(tmp_path / "model.json"), "--labels", str(tmp_path / "labels.csv"),
                "--out", str(tmp_path / "m.json"), "--allow-unsigned-model", "--bind", "tcp://127.0.0.1:1",
                "--timeout", "5", "--dp-epsilon", "2", "--budget", "1", "--ledger", str(tmp_path / "l.sqlite"))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("vfl: error")]
    assert len(lines) == 1 and "budget" in lines[0], done.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("content,message", [("id,score\nr1,1\nr1,2\n", "duplicate"),
                                             ("id,score\nr1,abc\n", "line 2: label 'abc' is not a number"),
                                             ("id,score\n", "holds no rows")])
def test_a_bad_labels_file_is_refused_before_anyone_is_contacted(tmp_path, content, message) -> None:
    from vfl.models.modelio import FittedModel, PartyColumns

    parties = [PartyColumns("alice", ["a"], [[-1.0, 1.0]], label_owner=True, intercept=True),
               PartyColumns("bob", ["b"], [[-1.0, 1.0]])]
    model = FittedModel("linear", "gaussian-fm", parties, np.array([0.5, 0.1, 0.25]), [-1.0, 1.0], label_name="score")
    model.to_json(tmp_path / "model.json")
    (tmp_path / "labels.csv").write_text(content)
    done = _vfl("evaluate", "--model", str(tmp_path / "model.json"), "--labels", str(tmp_path / "labels.csv"),
                "--out", str(tmp_path / "m.json"), "--allow-unsigned-model", "--bind", "tcp://127.0.0.1:1",
                "--timeout", "5")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("vfl: error")]
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "m.json").exists()
