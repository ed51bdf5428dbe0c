"""loadtest/bench_mirror: a tiny run (1 round, 3,000 records, two real brokers) prints
every figure it promises: a round of both pipelines, the medians and their ratio, and
the end-to-end lag percentiles."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.integration.broker import REPO_ROOT, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.integration]
TINY = ["--rounds", "1", "--messages", "3000", "--partitions", "2", "--rate", "200", "--seconds", "1"]


def test_tiny_bench_mirror():
    proc = subprocess.run([sys.executable, "-m", "loadtest.bench_mirror", *TINY], cwd=REPO_ROOT,
                          env=cli_env(), capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, f"{out[-4000:]}\n{proc.stderr[-4000:]}"
    assert re.search(r"^round 1: mirror [\d,]+ rec/s, pipeline [\d,]+ rec/s$", out, re.M), out
    assert re.search(r"ratio mirror/pipeline \d+\.\d\d", out), out
    assert re.search(r"end-to-end lag at 200 rec/s for 1 s \(200 records\): p50 \d+ ms, "
                     r"p99 \d+ ms, max \d+ ms", out), out
