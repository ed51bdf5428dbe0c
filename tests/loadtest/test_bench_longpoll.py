"""loadtest/bench_longpoll: a tiny run prints every stage of a caught-up long poll and
their total."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tiny_bench_longpoll():
    cmd = [sys.executable, "-m", "loadtest.bench_longpoll", "--partitions", "5",
           "--fetches", "20"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("caught-up long poll over 5 partitions, 20 Fetches")
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert list(rows) == ["decode", "partitions", "read", "park", "append", "wake", "encode",
                          "total"]
    assert all(float(median) > 0 and float(mean) > 0 for median, mean in rows.values())
    for column in (0, 1):
        parts = sum(float(v[column]) for k, v in rows.items() if k != "total")
        assert abs(parts - float(rows["total"][column])) < 1


def test_tiny_bench_longpoll_on_the_front():
    cmd = [sys.executable, "-m", "loadtest.bench_longpoll", "--partitions", "6",
           "--fetches", "20", "--front"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("caught-up long poll over 6 partitions, half of them on "
                               "another worker, 20 Fetches")
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert list(rows) == ["decode", "fan_out", "append", "wake", "encode", "total"]
    assert all(float(median) > 0 and float(mean) > 0 for median, mean in rows.values())
