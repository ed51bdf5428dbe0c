"""Suite-wide pytest setup (unit and integration tests).

Markers `slow` and `integration` are declared in pyproject.toml; they are registered
here too so that a run with a different rootdir/ini still knows them. Every test's
report is kept on its item (`item.rep_setup`, `item.rep_call`, ...) so that fixtures
can tell in their teardown whether the test failed (the integration harness prints
the broker's log then).
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from mpbroker import config as configmod
from tests.security.certs import Certs

# Set by the test command (scripts/dev.sh test), which installs everything the suite
# needs: there, a missing ZooKeeper or PySpark is a failure, not a skip. A developer's
# partial environment (no ZooKeeper, no pyspark) still gets skips.
REQUIRE_ALL = os.environ.get("MPBROKER_REQUIRE_ALL") == "1"


def require(what: str, why: str | None) -> None:
    """Skip (or, under the test command, fail) when `why` says a prerequisite is missing."""
    if why:
        if REQUIRE_ALL:
            pytest.fail(f"{what} is required by the test command but missing: {why}", pytrace=False)
        pytest.skip(f"no {what}: {why}", allow_module_level=True)


def require_module(name: str):
    try:
        return __import__(name)
    except ImportError as e:
        require(name, str(e))


def record_fsyncs(monkeypatch) -> list:
    """Every `os.fsync` from now on, as the path of its descriptor (a file or a dir)."""
    made = []
    real = os.fsync

    def fsync(fd):
        made.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return made


def broker_config(tmp_path, **extra):
    """A BrokerConfig of broker 0 on a loopback port 0 with its data under `tmp_path`;
    `extra` keys with "_" for "." (`num_workers=2`) or dotted strings."""
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": str(tmp_path / "data")}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return configmod.BrokerConfig(props)


async def until(cond, timeout: float = 10.0, what: str = "condition", step: float = 0.005):
    """Await `cond()` being true (returned), polling on the running event loop: the
    asyncio twin of tests/integration/broker.py `wait_until`; AssertionError after
    `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = cond()
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(step)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (kept in the suite; deselect with -m 'not slow')")
    config.addinivalue_line("markers", "integration: starts a real broker process")


def pytest_collection_finish(session):
    # Importing locust (or anything that runs gevent's monkey.patch_all) while collecting
    # makes every later test's threads and sockets greenlets: kazoo sessions, client
    # threads and the harness then hang until the per-test timeout. Refuse to run.
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and (monkey.is_module_patched("socket") or monkey.is_module_patched("threading")):
        raise pytest.UsageError("gevent monkey-patching happened while collecting tests (an import of "
                                "locust?): run locust in a subprocess and only look it up with "
                                "importlib.util.find_spec")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    """Test certificates (tests/security/certs.py: CA, server, client, untrusted, expired)."""
    return Certs(tmp_path_factory.mktemp("certs"))
