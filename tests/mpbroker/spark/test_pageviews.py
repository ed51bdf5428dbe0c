"""The reference pipeline (examples/pageviews) run end to end by its documented command,
on its own embedded broker: it exits 0 only when the streaming job's windowed counts
(in Parquet and in the results topic) match the batch reload of a past hour, with no
window missing and none written twice (examples/pageviews/run.py checks them)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_module

require_module("pyspark")

REPO_ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_pageviews_pipeline_end_to_end(tmp_path):
    proc = subprocess.run([sys.executable, "examples/pageviews/run.py", "--views", "3000",
                           "--workdir", str(tmp_path / "work")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    for step in ("[1/6]", "[3/6]", "[5/6]", "[6/6]"):
        assert step in proc.stdout, proc.stdout[-4000:]
