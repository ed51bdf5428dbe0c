"""loadtest/bench_log_open: a tiny in-process run prints its row (apply time, loop
stall, fsyncs per new log) and where the fsyncs were."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tiny_bench_log_open():
    cmd = [sys.executable, "-m", "loadtest.bench_log_open", "--sizes", "100", "--rounds", "1",
           "--fsyncs"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["partitions", "apply"]
    row = lines[1].split()
    assert row[0] == "100" and float(row[1]) > 0 and float(row[4]) < 1   # < 1 fsync a log
    assert any("_sync_new_dirs" in line for line in lines[2:])
