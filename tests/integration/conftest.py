"""Integration fixtures: the real broker process and real clients.

* `broker`: one broker process shared by the whole session (tests use unique topic
  names from `topic_name`); if it dies during a test, that test errors in teardown and
  the next test gets a new process on the same port and data dir.
* `fresh_broker(overrides=None)`: a factory for a private broker per test, with
  config overrides (`{"log.flush.interval.messages": 1}`), stopped after the test.
* `make_topic(partitions=1, config=None, name=None)`: creates a topic on `broker`
  with the confluent-kafka AdminClient and waits until Metadata shows its leaders.

When a test fails, the log of every broker it used (from the test's start for the
shared one) is attached to the report. `MPBROKER_TEST_BOOTSTRAP=host:port` runs the
tests against an already running broker instead (see broker.py).
"""

from __future__ import annotations

import atexit
import re
import uuid

import pytest

from tests.integration import broker as harness
from tests.integration.broker import Broker

atexit.register(harness.kill_all)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/integration/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)


def _track(node, b: Broker) -> None:
    if not hasattr(node, "_brokers"):
        node._brokers = []
    node._brokers.append((b, b.log_size()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for b, since in getattr(item, "_brokers", []):
            rep.sections.append((f"{b.name} log ({b.bootstrap}, {b.log_path})", b.log_text(since)))
        for i, m in enumerate(getattr(item, "_members", [])):
            rep.sections.append((f"member {i} ({m.client}) log", m.log_text()))


@pytest.fixture(scope="session")
def session_broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("session-broker"), name="session-broker")
    b.start()
    yield b
    if not b.external:
        b.stop()


@pytest.fixture
def broker(session_broker, request):
    if not session_broker.is_alive():
        session_broker.kill()
        session_broker.start()
    _track(request.node, session_broker)
    yield session_broker
    if not session_broker.is_alive():
        pytest.fail(f"the shared broker died during this test (exit code "
                    f"{session_broker.proc.returncode}); log:\n{session_broker.log_tail()}")


@pytest.fixture
def fresh_broker(tmp_path, request):
    made: list[Broker] = []

    def make(overrides: dict | None = None, **kw) -> Broker:
        if harness.external_bootstrap() and overrides:
            pytest.skip(f"config overrides need our own broker ({harness.EXTERNAL_BOOTSTRAP_ENV} is set)")
        b = Broker(tmp_path / f"broker{len(made)}", overrides, name=f"fresh-broker{len(made)}", **kw)
        made.append(b)
        _track(request.node, b)
        return b.start()

    yield make
    for b in made:
        if b.external:
            continue
        if b.is_alive():
            b.stop(timeout=20)
        else:
            b.kill()


@pytest.fixture
def topic_name(request) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:80].strip("-.")
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_topic(broker, request):
    counter = iter(range(1000))

    def make(partitions: int = 1, config: dict | None = None, name: str | None = None,
             on: Broker | None = None) -> str:
        if name is None:
            base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:80].strip("-.")
            name = f"{base}-{next(counter)}-{uuid.uuid4().hex[:8]}"
        return harness.create_topic((on or broker).bootstrap, name, partitions, config)

    return make
