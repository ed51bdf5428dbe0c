"""loadtest/bench_handoff: a tiny run measures a tailing consumer's broker CPU per
record and per Fetch with its connection on the partitions' owner and on the other
worker, with hand-off (a remote consumer is handed over) and without (it stays)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tiny_bench_handoff():
    cmd = [sys.executable, "-m", "loadtest.bench_handoff", "--records", "100",
           "--rate", "1000", "--min-each", "1", "--max-trials", "16"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    trials = re.findall(r"trial \d+ (handoff|no handoff): consumer (local|remote, handed over|"
                        r"remote): (\d+) Fetches,\s+([\d.]+) broker CPU µs per record,\s+"
                        r"([\d.]+) per Fetch", proc.stdout)
    kinds = {(arm, where) for arm, where, *_ in trials}
    # with hand-off a remote consumer always moves; without, it never does
    assert kinds == {("handoff", "local"), ("handoff", "remote, handed over"),
                     ("no handoff", "local"), ("no handoff", "remote")}, proc.stdout
    assert all(int(n) > 0 and float(r) > 0 and float(f) > 0 for *_, n, r, f in trials)
    for arm in ("handoff", "no handoff"):
        assert re.search(rf"^{arm}: broker CPU µs per record: consumer local [\d.]+ \(n=\d+\), "
                         rf"remote [\d.]+ \(n=\d+\), remote/local = [\d.]+; per Fetch: local "
                         rf"[\d.]+, remote [\d.]+$", proc.stdout, re.M), proc.stdout
