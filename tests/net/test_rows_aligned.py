"""Aligned rows or a refusal (issue 31): without ``--id`` a ``vfl party`` pairs its rows by position with every
co-party's, which nothing in the protocol can check, so it runs only if its operator states it (``--rows-aligned``,
``rows_aligned = true``); otherwise one line, exit code 2, before it reads its table or sends anything."""

from __future__ import annotations

import subprocess
import sys

import pytest
import zmq

from vfl.data.config import PartyConfig, check_row_alignment, load_party_config
from vfl.exceptions import ConfigurationError

VFL = [sys.executable, "-m", "vfl.cli"]


def _party(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*VFL, "party", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def listener():
    """A real ZeroMQ ROUTER on loopback where the party is told to connect: it must receive nothing."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield sock, f"tcp://127.0.0.1:{port}"
    sock.close(linger=0)
    ctx.term()


def test_a_party_without_id_or_the_statement_refuses_in_one_line_before_sending(tmp_path, listener, identity_dir):
    sock, url = listener
    missing = tmp_path / "not-read.csv"   # never read: the refusal comes first
    done = _party("--connect", url, "--name", "alice", "--data", str(missing), "--features", "a", "--label", "y",
                  "--identity-dir", str(identity_dir), "--no-progress", "--timeout", "5")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("vfl: error: party alice: without --id the parties pair their rows by position")
    assert "--rows-aligned" in lines[0] and "--id COLUMN" in lines[0] and "Traceback" not in done.stderr
    assert sock.poll(1000) == 0   # nothing was sent, not even a connection's first message


def test_id_and_rows_aligned_together_are_refused(tmp_path, identity_dir):
    done = _party("--connect", "tcp://127.0.0.1:1", "--name", "alice", "--data", str(tmp_path / "x.csv"),
                  "--features", "a", "--id", "id", "--rows-aligned", "--identity-dir", str(identity_dir))
    assert done.returncode == 2 and "--rows-aligned and --id exclude each other" in done.stderr, done.stderr


def test_the_statement_in_a_config_file_and_built_in_data_sets(tmp_path):
    cfg = tmp_path / "alice.toml"
    cfg.write_text('[party]\nname = "alice"\ndata = "a.csv"\nfeatures = ["a"]\nrows_aligned = true\n')
    check_row_alignment(load_party_config(cfg))   # stated: runs
    cfg.write_text('[party]\nname = "alice"\ndata = "a.csv"\nfeatures = ["a"]\nrows_aligned = "yes"\n')
    with pytest.raises(ConfigurationError, match="rows_aligned must be true or false"):
        load_party_config(cfg)
    with pytest.raises(ConfigurationError, match="pair their rows by position"):
        check_row_alignment(PartyConfig(name="alice", data="a.csv"))
    check_row_alignment(PartyConfig(name="alice", dataset="forestfires"))   # one built-in table: aligned
    check_row_alignment(PartyConfig(name="alice", data="a.csv", id="id"))
