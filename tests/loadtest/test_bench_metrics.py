"""loadtest/bench_metrics: a tiny run (1 round, 1 MB, two real brokers) prints every
figure it promises: the hot-path cost, a round per broker, the medians with both ratios,
scrapes that succeeded, and the hook's share of the metered broker's Produce time."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_module

require_module("confluent_kafka")

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_tiny_bench_metrics():
    cmd = [sys.executable, "-m", "loadtest.bench_metrics", "--rounds", "1", "--mb", "1",
           "--sizes", "1024", "--calls", "2000", "--scrape-s", "0.05"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=150)
    out = proc.stdout
    assert proc.returncode == 0, f"{out[-4000:]}\n{proc.stderr[-4000:]}"
    assert re.search(r"hot path: bare dispatch \d+ ns, metered \d+ ns", out), out
    for peer in ("off", "on"):
        assert re.search(rf"^\s+1\s+{peer}\s+1024\s+1\s+[\d.]+\s+[\d.]+$", out, re.M), out
    m = re.search(r"\((\d+) scrapes, (\d+) failed\)", out)
    assert m and int(m.group(1)) > 0 and m.group(2) == "0", out
    assert re.search(r"^\s+1024\s+1(\s+[\d.]+){6}$", out, re.M), out
    assert re.search(r"mean Produce request time on the metered broker: [\d.]+ ms", out), out
