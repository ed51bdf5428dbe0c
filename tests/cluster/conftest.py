"""Cluster-mode fixtures (tests/cluster/harness.py): one real ZooKeeper server for the
session; `cluster(n=3, overrides=None)` a factory of clusters, each on its own chroot
(`/<test name>-<k>`), killed after the test. A failing test gets every broker's log tail."""
from __future__ import annotations

import atexit
import re

import pytest

from tests.cluster.harness import Cluster, ZooKeeperServer, zookeeper_available
from tests.conftest import require
from tests.integration import broker as broker_harness

atexit.register(broker_harness.kill_all)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    require("ZooKeeper server", zookeeper_available())
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield zk
    zk.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for c in getattr(item, "_clusters", []):
            rep.sections.append(("cluster logs", c.logs()))


@pytest.fixture
def cluster(zookeeper, tmp_path, request):
    made: list[Cluster] = []

    def make(n: int = 3, overrides: dict | None = None, start: bool = True) -> Cluster:
        name = re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:60]
        c = Cluster(zookeeper, tmp_path / f"c{len(made)}", n, f"/{name}-{len(made)}", overrides,
                    start=False)
        made.append(c)
        request.node._clusters = made
        if start:
            c.start_all()
        return c
    yield make
    for c in made:
        c.close()
