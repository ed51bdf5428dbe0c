"""loadtest/bench_longpoll: a tiny run prints every stage of a caught-up long poll and
their total."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def tiny_run(*args: str) -> tuple[str, dict[str, list[str]]]:
    """The heading and the rows {stage: [median, mean]} of a tiny run."""
    cmd = [sys.executable, "-m", "loadtest.bench_longpoll", "--fetches", "20", *args]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert all(float(median) > 0 and float(mean) > 0 for median, mean in rows.values())
    return lines[0], rows


def test_tiny_bench_longpoll():
    heading, rows = tiny_run("--partitions", "5")
    assert heading.startswith("caught-up long poll over 5 partitions, 20 Fetches")
    assert list(rows) == ["decode", "partitions", "read", "park", "append", "wake", "encode",
                          "total"]
    for column in (0, 1):
        parts = sum(float(v[column]) for k, v in rows.items() if k != "total")
        assert abs(parts - float(rows["total"][column])) < 1


def test_tiny_bench_longpoll_on_the_front():
    heading, rows = tiny_run("--partitions", "6", "--front")
    assert heading.startswith("caught-up long poll over 6 partitions, half of them on "
                              "another worker, 20 Fetches")
    assert list(rows) == ["decode", "fan_out", "append", "wake", "encode", "total"]


def test_tiny_bench_longpoll_through_the_connection_memo():
    heading, rows = tiny_run("--partitions", "5", "--memo")
    assert heading.startswith("caught-up long poll over 5 partitions, through the "
                              "connection memo, 20 Fetches")
    assert list(rows) == ["decode", "serve", "append", "wake", "encode", "total"]
