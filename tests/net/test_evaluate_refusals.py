"""``vfl evaluate --dp-epsilon``: what a refused or failed DP evaluation charges and sends (review of issue 31).

Invariant: a DP evaluation the model cannot support (no finite public column bounds, e.g. a (DP-)BCD model, or a
linear model without label bounds) is refused in one line before anything is charged to the label owner's ledger
and before any serving party is contacted (the test IDs are not sent); a DP evaluation that fails after the
scoring (every test ID missing) leaves its reservation ``aborted`` with the reason, never dangling ``reserved``.
Real ``vfl evaluate`` / ``vfl serve`` processes on loopback (no Paillier keys: scoring uses none).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from vfl.demo import free_port

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner
VFL = [sys.executable, "-m", "vfl.cli"]
GENEROUS = "300"


def _model(path, *, bounds: bool = True, label_bounds: bool = True) -> None:
    from vfl.models.modelio import FittedModel, PartyColumns

    parties = [PartyColumns("alice", ["a"], [[-1.0, 1.0]] if bounds else None, label_owner=True, intercept=True),
               PartyColumns("bob", ["b"], [[-1.0, 1.0]])]
    FittedModel("linear", "gaussian-fm", parties, np.array([0.5, 0.1, 0.25]),
                [-1.0, 1.0] if label_bounds else None, label_name="score").to_json(path)


@pytest.mark.parametrize("what,message", [("column bounds", "public bounds on every column"),
                                          ("label bounds", "need its public label bounds")])
def test_a_dp_evaluation_the_model_cannot_support_is_refused_before_anything_is_charged_or_sent(tmp_path, what,
                                                                                               message) -> None:
    _model(tmp_path / "model.json", bounds=what != "column bounds", label_bounds=what != "label bounds")
    (tmp_path / "labels.csv").write_text("id,score\nr1,0.5\nr2,-0.5\n")
    ledger = tmp_path / "l.sqlite"
    done = subprocess.run([*VFL, "evaluate", "--model", str(tmp_path / "model.json"), "--labels",
                           str(tmp_path / "labels.csv"), "--out", str(tmp_path / "m.json"), "--allow-unsigned-model",
                           "--bind", f"tcp://127.0.0.1:{free_port()}", "--timeout", GENEROUS, "--dp-epsilon", "1",
                           "--ledger", str(ledger)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("vfl: error")]
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "listening" not in done.stdout and "ledger" not in done.stdout, done.stdout   # nobody contacted
    assert not ledger.exists() and not (tmp_path / "m.json").exists()


def test_a_dp_evaluation_that_fails_after_scoring_is_aborted_in_the_ledger(tmp_path) -> None:
    from vfl.privacy.ledger import Ledger

    _model(tmp_path / "model.json")
    (tmp_path / "labels.csv").write_text("id,score\nr1,0.5\nr2,-0.5\n")
    for name, col in (("alice", "a"), ("bob", "b")):          # they hold none of the test IDs
        (tmp_path / f"{name}.csv").write_text(f"id,{col}\nx1,0.2\nx2,-0.3\n")
    url, ledger = f"tcp://127.0.0.1:{free_port()}", tmp_path / "l.sqlite"
    hub = subprocess.Popen([*VFL, "evaluate", "--model", str(tmp_path / "model.json"), "--labels",
                            str(tmp_path / "labels.csv"), "--out", str(tmp_path / "m.json"), "--allow-unsigned-model",
                            "--bind", url, "--timeout", GENEROUS, "--dp-epsilon", "1", "--ledger", str(ledger)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    servers = [subprocess.Popen([*VFL, "serve", "--model", str(tmp_path / "model.json"), "--connect", url, "--name",
                                 name, "--data", str(tmp_path / f"{name}.csv"), "--id", "id", "--insecure-no-identity",
                                 "--allow-unsigned-model", "--timeout", GENEROUS],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("alice", "bob")]
    try:
        stdout, stderr = hub.communicate(timeout=500)
        for s in servers:
            s.communicate(timeout=300)
    finally:
        for p in (hub, *servers):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert hub.returncode == 2, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("vfl: error")]
    assert len(lines) == 1 and "no scored test ID" in lines[0], stderr
    assert "composed at delta 1e-05" in stdout, stdout    # the ledger line says at which delta it composes
    runs = Ledger(ledger).runs()
    assert [r.state for r in runs] == ["aborted"] and "no scored test ID" in (runs[0].reason or ""), runs
    assert runs[0].epsilon == 1.0                          # the spend stays counted
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("clash", ["out is labels", "scores-out is out", "out is model"])
def test_an_output_path_that_is_an_input_or_the_other_output_is_refused(tmp_path, clash) -> None:
    """--force must not let the metrics overwrite the labels file or the model, nor the two outputs each other:
    one line, exit 2, before anyone is contacted, every input file unchanged."""
    _model(tmp_path / "model.json")
    labels, model = tmp_path / "labels.csv", tmp_path / "model.json"
    labels.write_text("id,score\nr1,0.5\nr2,-0.5\n")
    before = {p: p.read_bytes() for p in (labels, model)}
    out = {"out is labels": labels, "scores-out is out": tmp_path / "m.json", "out is model": model}[clash]
    extra = ["--scores-out", str(out)] if clash == "scores-out is out" else []
    done = subprocess.run([*VFL, "evaluate", "--model", str(model), "--labels", str(labels), "--out", str(out),
                           *extra, "--force", "--allow-unsigned-model", "--bind", f"tcp://127.0.0.1:{free_port()}",
                           "--timeout", GENEROUS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("vfl: error")]
    assert len(lines) == 1 and "same file" in lines[0], done.stderr
    assert "listening" not in done.stdout, done.stdout
    assert {p: p.read_bytes() for p in (labels, model)} == before
