"""docs/performance.md's WAN table is benchmarks/wan.py's rendering of docs/data/wan.json (issue 34), and the
benchmark's two moving parts work: the delay line delays every byte without losing or reordering any, and the
benchmark refuses in one line where it cannot shape links.

``nice -n 10 python benchmarks/wan.py --rows 10000,100000 --json docs/data/wan.json`` wrote the JSON (root, ip, tc).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from helpers.docs_tables import load_benchmark, section

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "performance.md"
WAN_JSON = ROOT / "docs" / "data" / "wan.json"
HEADING = "## Across a WAN: every role in its own network namespace (issue 34)"


def test_the_wan_table_is_the_committed_runs() -> None:
    bench, doc = load_benchmark("wan"), json.loads(WAN_JSON.read_text())
    runs = doc["runs"]
    text = section(DOC, HEADING)
    assert bench.markdown(runs) in text
    assert doc["command"] in text.replace("\n", " ") or doc["command"].split(" python ", 1)[1] in text
    measured = {(r["n"], r["link"]) for r in runs}
    assert {(n, link) for n in (10_000, 100_000) for link in ("100mbit-20ms", "1gbit-2ms")} <= measured
    for r in runs:
        assert all(code == 0 for code in r["exit_codes"].values())
        assert r["max_abs_diff_vs_lstsq"] <= 1e-6
        assert r["date"][:10] in text
        # bytes come from the kernel's counters: every role sent at least one 512-byte ciphertext per row
        assert all(r["sent_bytes"][role] >= 512 * r["n"] for role in ("coordinator", "alice", "bob")), r
        assert r["delay_by"] in text


def test_the_prose_numbers_are_the_json() -> None:
    bench, runs = load_benchmark("wan"), json.loads(WAN_JSON.read_text())["runs"]
    text = section(DOC, HEADING)
    assert bench.comparison_text(runs) in text
    by = {(r["n"], r["link"]): r for r in runs}
    base, slow = by[(100_000, "unshaped")], by[(100_000, "100mbit-20ms")]
    assert f"about {base['sent_bytes_per_row']['alice']:,.0f} bytes per row" in text
    assert f"(about {base['sent_bytes_per_row']['coordinator']:,.0f} bytes per row)" in text
    busiest = max(slow["sent_bytes"]["alice"], slow["sent_bytes"]["bob"])
    assert f"about {busiest / 1e6:.0f} MB each way, {busiest * 8 / 100e6:.1f} s at" in text
    assert f"against about {base['cpu_s_total']:.0f} CPU-s" in text
    extra = [100 * (by[(n, "100mbit-20ms")]["sent_bytes"][r] / by[(n, "unshaped")]["sent_bytes"][r] - 1)
             for n in (10_000, 100_000) for r in ("coordinator", "alice", "bob")]
    assert f"costs {min(extra):.0f}-{max(extra):.0f} % more bytes" in text, extra


def test_the_docs_name_what_could_not_be_run_here() -> None:
    text = section(DOC, HEADING)
    assert "sch_netem" in text and "pip" in text and "outside measurement" in text


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_delay_line_delays_every_byte_both_ways_and_keeps_them() -> None:
    delay_ms = 150.0
    srv, port = _echo_server()
    listen = _free_port()
    line = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "delay_line.py"), "--listen",
                             f"127.0.0.1:{listen}", "--to", f"127.0.0.1:{port}", "--delay-ms", str(delay_ms)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert line.stdout is not None and line.stdout.readline().strip() == "delay line ready"
        payload = os.urandom(3 * 2**20)
        with socket.create_connection(("127.0.0.1", listen), timeout=600) as c:
            start = time.monotonic()
            c.sendall(b"x")
            assert c.recv(1) == b"x"
            rtt = time.monotonic() - start
            got = bytearray()
            sender = threading.Thread(target=c.sendall, args=(payload,))
            sender.start()
            while len(got) < len(payload):
                chunk = c.recv(2**20)
                assert chunk, "the delay line closed early"
                got += chunk
            sender.join()
            c.shutdown(socket.SHUT_WR)
            assert c.recv(1) == b"", "the end of stream is forwarded"
        # two passes through the line (there and back); the lower bound holds on any machine, however loaded
        assert rtt >= 2 * delay_ms / 1e3
        assert bytes(got) == payload
    finally:
        line.terminate()
        line.wait(timeout=600)
        srv.close()


def test_the_benchmark_refuses_in_one_line_without_tc() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wan.py"), "--rows", "10"], capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PATH": "/nonexistent"})
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wan.py: needs"), r.stderr
