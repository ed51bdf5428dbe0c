"""loadtest/bench_acl: the in-process part prints the front check's cost per request
(no authorizer, cache hit, cache miss)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tiny_bench_acl_per_request():
    cmd = [sys.executable, "-m", "loadtest.bench_acl", "--skip-end-to-end", "--checks", "200"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {line[:18].strip(): line[18:] for line in proc.stdout.splitlines()[1:4]}
    assert set(rows) == {"no authorizer", "ACLs, cache hit", "ACLs, cache miss"}
    assert all(float(v.split()[0]) > 0 for v in rows.values())
