"""Fixtures for the Spark data source tests: one real mpbroker process and one local
SparkSession for the whole run.

The broker is `tests/integration/broker.py`'s `Broker` (the real `mpbroker serve` as a
subprocess on a free port with a temporary data directory; `MPBROKER_TEST_BOOTSTRAP`
points the tests at another Kafka-compatible broker instead). The SparkSession is
`local[2]` with 2 shuffle partitions and no UI so the suite fits a 2-core machine; its
Python workers get this interpreter (`PYSPARK_PYTHON`) and the repository on
`PYTHONPATH` so that they import `mpbroker.spark`.

The test modules skip themselves when pyspark is not importable (and fail under the
test command, which installs it: tests/conftest.py `require_module`).
"""
from __future__ import annotations

import atexit
import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration import broker as harness
from tests.integration.broker import Broker

REPO_ROOT = Path(__file__).resolve().parents[3]
atexit.register(harness.kill_all)


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("spark-broker"), name="spark-broker")
    b.start()
    yield b
    if not b.external:
        b.stop()


@pytest.fixture
def broker(spark_broker):
    if not spark_broker.is_alive():
        spark_broker.kill()
        spark_broker.start()
    return spark_broker


@pytest.fixture
def bootstrap(broker) -> str:
    return broker.bootstrap


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    import mpbroker.spark

    session = (SparkSession.builder.master("local[2]").appName("mpbroker-spark-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    mpbroker.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def topic_name(request) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:60].strip("-.")
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_topic(bootstrap, topic_name):
    counter = iter(range(100))

    def make(partitions: int = 1, config: dict | None = None) -> str:
        return harness.create_topic(bootstrap, f"{topic_name}-{next(counter)}", partitions, config)

    return make
