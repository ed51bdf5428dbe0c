"""Memory and connections bounded by configuration (issue #15 item 3), on the real broker.

* A flood of frame headers each declaring 100 MB (and sending a little) under a cgroup v1
  memory limit made by the test (`/sys/fs/cgroup/memory/mpbroker-test-*`, holding the
  whole broker process tree from its first exec): no OOM kill, no worker respawned, and
  a real client (confluent-kafka) produces and consumes meanwhile.
* `queued.max.request.bytes`: clients that send most of large frames exhaust the pool;
  the workers mute instead of growing, and a real client is served once they go.
* `max.connections` (per broker, across 2 workers): the connection past the limit gets
  no answer until another closes. `max.connections.per.ip` (+ overrides, from
  127.0.0.2): the connection past an address's limit is closed at once.
* `connections.max.idle.ms`: an idle connection is closed by the broker.
* `socket.request.max.bytes`: a larger size prefix closes the connection (one log line),
  the broker keeps serving.
"""
from __future__ import annotations

import os
import shlex
import socket
import struct
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import require, require_module
from tests.integration import broker as harness
from tests.integration.broker import Broker, api_versions_v0, frame_request, recv_frame

pytestmark = [pytest.mark.slow, pytest.mark.integration]

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
MB = 1024 * 1024


def wait_for(cond, timeout: float, what: str, step: float = 0.05):
    return harness.wait_until(cond, timeout, what, step=step)


def api_versions_on(sock: socket.socket, cid: int = 7) -> bytes:
    sock.sendall(frame_request(harness.API_VERSIONS, 0, cid))
    return recv_frame(sock)


def connect(b: Broker, source: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", b.port))
    return s


def open_served(b: Broker, source: str = "127.0.0.1") -> socket.socket:
    """A connection that got an answer. Retried while the broker closes it: connections
    the test closed just before may still be counted until the broker sees them go."""
    deadline = time.monotonic() + 10
    while True:
        s = connect(b, source)
        try:
            assert api_versions_on(s)
            return s
        except (ConnectionError, struct.error):
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    """True when the broker closes `s` within `timeout` (EOF or reset)."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def worker_starts(b: Broker) -> int:
    return b.log_path.read_text(errors="replace").count(" serving on ")


class CgroupBroker(Broker):
    """The broker started inside a memory cgroup: the shell writes its own pid into the
    group, then execs the broker (same pid), so every child is forked inside it."""

    def __init__(self, *a, cgroup: Path, **kw):
        super().__init__(*a, **kw)
        self.cgroup = cgroup

    def command(self) -> list[str]:
        inner = " ".join(shlex.quote(c) for c in super().command())
        return ["/bin/sh", "-c", f"echo $$ > {self.cgroup}/cgroup.procs && exec {inner}"]


@pytest.fixture
def memory_cgroup():
    if not (CGROUP_ROOT / "memory.limit_in_bytes").exists() or os.geteuid() != 0:
        require("cgroup v1 memory controller (as root)", f"{CGROUP_ROOT} not writable")
    path = CGROUP_ROOT / f"mpbroker-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        yield path
    finally:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                path.rmdir()
                break
            except OSError:                   # the broker's processes are still exiting
                for pid in (path / "cgroup.procs").read_text().split():
                    try:
                        (CGROUP_ROOT / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
                time.sleep(0.1)


@pytest.fixture
def start_broker(tmp_path):
    made: list[Broker] = []

    def make(overrides: dict, cgroup: Path | None = None) -> Broker:
        if harness.external_bootstrap():
            pytest.skip("needs our own broker process")
        workdir = tmp_path / f"b{len(made)}"
        b = (CgroupBroker(workdir, overrides, cgroup=cgroup) if cgroup
             else Broker(workdir, overrides))
        made.append(b)
        return b.start()
    yield make
    for b in made:
        if b.is_alive():
            b.stop(timeout=20)
        else:
            b.kill()


def produce_and_consume(bootstrap: str, topic: str, n: int = 50) -> None:
    ck = require_module("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=b"k", value=f"v{i}".encode())
    assert p.flush(30) == 0
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert got == [f"v{i}".encode() for i in range(n)]
    finally:
        c.close()


def test_large_frame_headers_under_a_memory_limit(start_broker, memory_cgroup):
    """50 connections x 100 MB declared (~1 KB sent each) under a 700 MiB limit: before
    the fix each cost 100 MB up front and the workers were OOM-killed."""
    (memory_cgroup / "memory.limit_in_bytes").write_text(str(700 * MB))
    b = start_broker({"num.workers": 2, "num.partitions": 1}, cgroup=memory_cgroup)
    assert str(b.proc.pid) in (memory_cgroup / "cgroup.procs").read_text().split()
    wait_for(lambda: worker_starts(b) == 2, 60, "both workers serving")
    flood = []
    try:
        for _ in range(50):
            s = connect(b)
            s.sendall(struct.pack(">i", 100 * MB) + b"\x00\x12\x00\x00" + b"x" * 1020)
            flood.append(s)
        produce_and_consume(b.bootstrap, f"mem-{uuid.uuid4().hex[:6]}")
        api_versions_v0(b.bootstrap)
        assert b.is_alive() and worker_starts(b) == 2, "a worker was respawned"
        oom = (memory_cgroup / "memory.oom_control").read_text()
        assert "oom_kill 0" in oom, oom
    finally:
        for s in flood:
            s.close()


def group_rss(b: Broker) -> int:
    """Resident bytes of the broker's processes (its process group)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) != b.proc.pid:              # pgrp
                continue
            total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")     # rss in pages
        except (OSError, IndexError, ValueError):
            continue
    return total


def test_request_pool_mutes_instead_of_growing(start_broker):
    """queued.max.request.bytes=8 MB per worker, socket.request.max.bytes=4 MB: 20
    clients each sending 3.5 MB of a 4 MB frame would make the workers hold 70 MB; with
    the pool they hold about 2 x 8 MB and stop reading (the rest waits in the kernel or
    is never sent). Once the clients go, their memory is released and a real client is
    served."""
    b = start_broker({"num.workers": 2, "socket.request.max.bytes": 4 * MB,
                      "queued.max.request.bytes": 8 * MB})
    api_versions_v0(b.bootstrap)
    before = group_rss(b)
    hogs = []
    chunk = b"y" * (256 * 1024)
    sent = 0
    try:
        for _ in range(20):
            s = connect(b)
            s.setblocking(False)
            s.send(struct.pack(">i", 4 * MB))
            hogs.append([s, 3 * MB + MB // 2])
        deadline = time.monotonic() + 20
        idle_rounds = 0
        while idle_rounds < 10 and time.monotonic() < deadline:
            moved = 0
            for h in hogs:
                if h[1] <= 0:
                    continue
                try:
                    n = h[0].send(chunk[:h[1]])
                except BlockingIOError:
                    continue
                h[1] -= n
                moved += n
            sent += moved
            idle_rounds = 0 if moved else idle_rounds + 1
            if not moved:
                time.sleep(0.1)
        grown = group_rss(b) - before
        assert sent > 30 * MB, f"only {sent} bytes sent: the test did not load the pool"
        assert grown < 40 * MB, f"the broker grew by {grown >> 20} MB with an 8 MB pool per worker"
    finally:
        for h in hogs:
            h[0].close()
    wait_for(lambda: _api_versions_ok(b), 15, "muted workers to release the clients that left")
    produce_and_consume(b.bootstrap, f"pool-{uuid.uuid4().hex[:6]}", n=20)


def test_max_connections_and_per_ip_limits(start_broker):
    b = start_broker({"num.workers": 2, "max.connections": 5, "max.connections.per.ip": 3,
                      "max.connections.per.ip.overrides": "127.0.0.2:1"})
    held = []
    try:
        held += [open_served(b) for _ in range(3)]
        # the 4th from 127.0.0.1 is over the address's limit: closed at once
        extra = connect(b)
        assert closed_by_peer(extra, 10), "connection over max.connections.per.ip kept open"
        extra.close()
        # 127.0.0.2 has its own limit (1)
        held.append(open_served(b, "127.0.0.2"))
        second = connect(b, "127.0.0.2")
        assert closed_by_peer(second, 10), "connection over the override kept open"
        second.close()
        # the broker's 5th connection is its last (max.connections counts both workers)
        held.append(open_served(b, "127.0.0.3"))
        sixth = connect(b, "127.0.0.4")
        sixth.sendall(frame_request(harness.API_VERSIONS, 0, 11))
        sixth.settimeout(1.5)
        with pytest.raises(socket.timeout):
            recv_frame(sixth)                       # waits: not answered, not closed
        held.pop(0).close()                         # a slot frees ...
        sixth.settimeout(10)
        assert recv_frame(sixth)                    # ... and the waiting one is served
        held.append(sixth)
    finally:
        for s in held:
            s.close()
    wait_for(lambda: _api_versions_ok(b), 10, "the broker to accept again")


def _api_versions_ok(b: Broker) -> bool:
    try:
        api_versions_v0(b.bootstrap, timeout=2.0)
        return True
    except (OSError, ConnectionError, struct.error):
        return False


def test_idle_connections_are_closed(start_broker):
    b = start_broker({"num.workers": 1, "connections.max.idle.ms": 3000})
    idle, busy = connect(b), connect(b)
    assert api_versions_on(idle)
    try:
        # a connection with a request every 0.3 s stays open while the idle one closes
        sent = [0]

        def idle_closed() -> bool:
            if closed_by_peer(idle, 0.3):
                return True
            sent[0] += 1
            assert api_versions_on(busy, cid=sent[0])
            return False
        harness.wait_until(idle_closed, 20, "the idle connection to be closed", step=0)
        assert api_versions_on(busy, cid=sent[0] + 1)
    finally:
        idle.close()
        busy.close()


def test_socket_request_max_bytes(start_broker):
    b = start_broker({"num.workers": 1, "socket.request.max.bytes": 2048})
    ok = connect(b)
    body = struct.pack(">hhi", harness.API_VERSIONS, 0, 1) + b"\x00\x00" + b"p" * 1500
    ok.sendall(struct.pack(">i", len(body)) + body)  # under the cap: answered
    assert recv_frame(ok)
    big = connect(b)
    big.sendall(struct.pack(">i", 2049) + b"\x00" * 16)
    assert closed_by_peer(big, 10), "frame over socket.request.max.bytes kept open"
    big.close()
    assert api_versions_on(ok, cid=2)
    ok.close()
    log = b.log_path.read_text(errors="replace")
    assert log.count("frame size 2049 outside 0..2048") == 1, log[-3000:]


def test_per_ip_limit_set_dynamically(start_broker):
    """max.connections.per.ip is a cluster-wide dynamic key: IncrementalAlterConfigs on
    the broker applies to the next connections of every worker."""
    require_module("confluent_kafka")
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)
    b = start_broker({"num.workers": 2})
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("max.connections.per.ip", "2", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res], request_timeout=30)[res].result(30)
    del a
    held = []
    try:
        # the admin client's own connection may still be counted until the broker sees it go
        held += [open_served(b, "127.0.0.5") for _ in range(2)]

        def third_refused() -> bool:
            s = connect(b, "127.0.0.5")
            try:
                return closed_by_peer(s, 2)
            finally:
                s.close()
        wait_for(third_refused, 30, "the dynamic max.connections.per.ip to apply")
    finally:
        for s in held:
            s.close()
