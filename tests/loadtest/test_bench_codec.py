"""loadtest/bench_codec: a tiny run prints every case with its rate."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tiny_bench_codec():
    proc = subprocess.run([sys.executable, "-m", "loadtest.bench_codec", "0.01"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines] == [
        "decode Produce v9 request (1 x 16 KiB batch)",
        "encode Fetch v12 response (10 partitions, FileSlice)",
        "encode Fetch v12 response (10 partitions, 16 KiB bytes)",
        "encode+frame Fetch v12 response (10 partitions, FileSlice)",
        "encode Fetch v16 response (50 partitions, caught up)",
        "encode Produce v10 response (1 partition)",
        "parse_request_header (v2)"]
    assert all(float(line.split()[-2].replace(",", "")) > 0 for line in lines)
