"""loadtest/locustfile.py: short headless locust runs against the real broker.

Each run is a `locust` subprocess (as a user types it) with CSV and HTML reports; the
checks read the reports back: requests > 0 for produce and consume, no failures, and an
HTML report that holds the topic's statistics. Also: options from the environment,
failed deliveries counted as failures, and a distributed run (master plus one worker).
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import require, require_module
from tests.integration import broker as harness

# Only look for locust: importing it runs gevent's monkey.patch_all(), which would turn
# every later test's threads and sockets (kazoo, the harness) into greenlets. locust runs
# in a subprocess here.
require("locust", None if importlib.util.find_spec("locust") else "pip install locust")
require_module("confluent_kafka")

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = REPO_ROOT / "loadtest" / "locustfile.py"

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def locust_cmd(bootstrap: str, out: Path, users: list[str], seconds: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2",
            "-t", f"{seconds}s", "--host", bootstrap, "--csv", str(out / "run"), "--html", str(out / "run.html"),
            "--stop-timeout", "10", "--only-summary", *extra, *users]


def run_locust(bootstrap: str, out: Path, users: list[str], seconds: int, *extra: str, topic: str | None = None,
               env: dict | None = None, expect_rc: int = 0) -> tuple[str, dict]:
    """One headless locust run; -> (topic, {(type, name): row of run_stats.csv})."""
    if topic is None:
        topic = f"locust-{uuid.uuid4().hex[:8]}"
        extra = ("--kafka-topic", topic, "--kafka-partitions", "4", "--kafka-record-size", "200",
                 "--kafka-offset-reset", "earliest", *extra)
    proc = subprocess.run(locust_cmd(bootstrap, out, users, seconds, *extra), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=seconds + 60, env={**os.environ, **(env or {})})
    assert proc.returncode == expect_rc, \
        f"locust exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    with open(out / "run_stats.csv", newline="") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    return topic, rows


def check_reports(out: Path, topic: str, rows: dict, record_size: int = 200) -> None:
    for op in ("produce", "consume"):
        row = rows.get((op, topic))
        assert row is not None, f"no {op} row in {sorted(rows)}"
        assert int(row["Request Count"]) > 0, row
        assert int(row["Failure Count"]) == 0, row
        assert float(row["Average Content Size"]) >= record_size, row
    agg = rows[("", "Aggregated")]
    assert int(agg["Request Count"]) > 0 and int(agg["Failure Count"]) == 0, agg
    with open(out / "run_failures.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []
    html = (out / "run.html").read_text()
    # The HTML report carries the run's statistics: the topic under both request types.
    assert html.lstrip().lower().startswith("<!doctype html") and "</html>" in html.lower()
    assert topic in html and '"produce"' in html and '"consume"' in html


def test_producer_and_assign_consumer(loadtest_broker, tmp_path):
    topic, rows = run_locust(loadtest_broker.bootstrap, tmp_path, ["ProducerUser", "ConsumerUser"], 10,
                             "--kafka-keys", "16", "--kafka-acks", "all", "--kafka-linger-ms", "2")
    check_reports(tmp_path, topic, rows)


def test_producer_and_group_consumer(loadtest_broker, tmp_path):
    topic, rows = run_locust(loadtest_broker.bootstrap, tmp_path, ["ProducerUser", "GroupConsumerUser"], 6,
                             "--kafka-group", f"g-{uuid.uuid4().hex[:6]}", "--kafka-compression", "lz4")
    check_reports(tmp_path, topic, rows)


def test_configured_from_the_environment(loadtest_broker, tmp_path):
    topic = f"locust-env-{uuid.uuid4().hex[:8]}"
    env = {"KAFKA_TOPIC": topic, "KAFKA_PARTITIONS": "3", "KAFKA_RECORD_SIZE": "300",
           "KAFKA_OFFSET_RESET": "earliest", "KAFKA_ACKS": "1"}
    _, rows = run_locust(loadtest_broker.bootstrap, tmp_path, ["ProducerUser", "ConsumerUser"], 5, topic=topic,
                         env=env)
    check_reports(tmp_path, topic, rows, record_size=300)
    md = harness.admin(loadtest_broker.bootstrap).list_topics(topic, timeout=10).topics[topic]
    assert len(md.partitions) == 3


def test_failed_deliveries_are_failed_requests(loadtest_broker, tmp_path):
    # Records over the topic's max.message.bytes: the broker answers MESSAGE_TOO_LARGE,
    # every delivery report is an error, locust counts failures and exits 1.
    topic = harness.create_topic(loadtest_broker.bootstrap, f"locust-small-{uuid.uuid4().hex[:8]}", 1,
                                 {"max.message.bytes": "100"})
    _, rows = run_locust(loadtest_broker.bootstrap, tmp_path, ["ProducerUser"], 4, "--kafka-topic", topic,
                         "--kafka-record-size", "500", "--kafka-batch", "5", topic=topic, expect_rc=1)
    row = rows[("produce", topic)]
    assert int(row["Failure Count"]) > 0 and int(row["Failure Count"]) == int(row["Request Count"]), row
    with open(tmp_path / "run_failures.csv", newline="") as f:
        failures = list(csv.DictReader(f))
    assert failures and all(r["Name"] == topic for r in failures), failures
    assert any("too large" in r["Error"].lower() for r in failures), failures


def test_distributed_master_and_worker(loadtest_broker, tmp_path):
    port = harness.free_port()
    worker = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker",
                               "--master-host", "127.0.0.1", "--master-port", str(port)],
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        topic, rows = run_locust(loadtest_broker.bootstrap, tmp_path, ["ProducerUser", "ConsumerUser"], 6,
                                 "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                                 "--expect-workers", "1", "--expect-workers-max-wait", "30")
        check_reports(tmp_path, topic, rows)
        # The master ran no users itself: the worker's requests are what the report counts.
        out, _ = worker.communicate(timeout=30)
        assert worker.returncode == 0, out[-4000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
