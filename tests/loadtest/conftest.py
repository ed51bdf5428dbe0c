"""Fixtures of the load-test tests: one real mpbroker process for the module's tests."""

from __future__ import annotations

import atexit

import pytest

from tests.integration import broker as harness
from tests.integration.broker import Broker

atexit.register(harness.kill_all)


@pytest.fixture(scope="module")
def loadtest_broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("loadtest-broker"), name="loadtest-broker")
    b.start()
    yield b
    if not b.external:
        b.stop()
