"""loadtest/bench_forward --requests: a tiny run measures the broker's CPU per Produce
request with the producer's connection on the partitions' owner and on the other
worker, and prints both and their ratio."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tiny_bench_forward_per_request():
    cmd = [sys.executable, "-m", "loadtest.bench_forward", "--requests", "200",
           "--rate", "2000", "--min-each", "1", "--max-trials", "16"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    trials = re.findall(r"worker (\d) \((local|remote)\): (\d+) Produce requests,\s+([\d.]+) "
                        r"broker CPU µs per request \(user [\d.]+, system [\d.]+\)",
                        proc.stdout)
    assert {(w, where) for w, where, _, _ in trials} == {("0", "local"), ("1", "remote")}
    # one request per record at this pace, give or take the few a busy moment batches
    # (and a metadata refresh)
    assert all(150 <= int(n) <= 205 and float(us) >= 0 for _, _, n, us in trials)
    summary = re.search(r"broker CPU µs per Produce request: local ([\d.]+) \(n=\d+\), remote "
                        r"([\d.]+) \(n=\d+\), remote/local = ([\d.]+|inf); user/system local "
                        r"[\d.]+/[\d.]+, remote [\d.]+/[\d.]+", proc.stdout)
    assert summary, proc.stdout
