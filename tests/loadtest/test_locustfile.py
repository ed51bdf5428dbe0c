"""loadtest/locustfile.py: short headless locust runs against the real broker.

Each run is a `locust` subprocess (as a user types it) with CSV and HTML reports; the
checks read the reports back: requests > 0 for produce and consume, no failures, and an
HTML report that parses and names the topic.
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import require

# Only look for locust: importing it runs gevent's monkey.patch_all(), which would turn
# every later test's threads and sockets (kazoo, the harness) into greenlets. locust runs
# in a subprocess here.
require("locust", None if importlib.util.find_spec("locust") else "pip install locust")
pytest.importorskip("confluent_kafka")

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = REPO_ROOT / "loadtest" / "locustfile.py"

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def run_locust(bootstrap: str, out: Path, users: list[str], seconds: int, *extra: str) -> tuple[str, dict]:
    topic = f"locust-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2",
           "-t", f"{seconds}s", "--host", bootstrap, "--csv", str(out / "run"), "--html", str(out / "run.html"),
           "--kafka-topic", topic, "--kafka-partitions", "4", "--kafka-record-size", "200",
           "--kafka-offset-reset", "earliest", "--stop-timeout", "10", "--only-summary", *extra, *users]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=seconds + 60)
    assert proc.returncode == 0, f"locust exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    with open(out / "run_stats.csv", newline="") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    return topic, rows


def check_reports(out: Path, topic: str, rows: dict) -> None:
    for op in ("produce", "consume"):
        row = rows.get((op, topic))
        assert row is not None, f"no {op} row in {sorted(rows)}"
        assert int(row["Request Count"]) > 0, row
        assert int(row["Failure Count"]) == 0, row
        assert float(row["Average Content Size"]) >= 200, row
    agg = rows[("", "Aggregated")]
    assert int(agg["Request Count"]) > 0 and int(agg["Failure Count"]) == 0, agg
    with open(out / "run_failures.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []
    html = (out / "run.html").read_text()
    HTMLParser().feed(html)  # raises on nothing but makes sure it is text HTML
    assert "<html" in html.lower() and topic in html


def test_producer_and_assign_consumer(loadtest_broker, tmp_path):
    topic, rows = run_locust(loadtest_broker.bootstrap, tmp_path, ["ProducerUser", "ConsumerUser"], 10,
                             "--kafka-keys", "16", "--kafka-acks", "all", "--kafka-linger-ms", "2")
    check_reports(tmp_path, topic, rows)


def test_producer_and_group_consumer(loadtest_broker, tmp_path):
    topic, rows = run_locust(loadtest_broker.bootstrap, tmp_path, ["ProducerUser", "GroupConsumerUser"], 6,
                             "--kafka-group", f"g-{uuid.uuid4().hex[:6]}", "--kafka-compression", "lz4")
    check_reports(tmp_path, topic, rows)
