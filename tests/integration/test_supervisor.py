"""The supervisor of the real `mpbroker serve`: systemd notifications on a real datagram
socket, controlled shutdown, respawn of a killed worker, murder of a hung one, crash-loop
protection, SIGHUP reload, SIGINT fast stop, and the systemd unit.

Each test runs its own broker (harness `Broker`), with NOTIFY_SOCKET / WATCHDOG_USEC in
its environment where the test listens as systemd would. Worker pids come from the
supervisor's log ("worker 0 (pid N) serving on ...").
"""
from __future__ import annotations

import configparser
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import require
from tests.integration import broker as h

pytestmark = pytest.mark.skipif(h.external_bootstrap() is not None,
                                reason="needs our own broker process")

SERVING = re.compile(rb"worker 0 \(pid (\d+)\) serving on")
UNIT = Path(__file__).resolve().parents[2] / "conf" / "mpbroker.service"


class SystemdListener:
    """The service manager's end of sd_notify: an abstract-namespace datagram socket."""

    def __init__(self):
        self.name = f"@mpbroker-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + self.name[1:].encode())
        self.messages: list[dict[str, str]] = []

    def wait_for(self, key: str, value: str = "1", timeout: float = 20.0, after: int = 0) -> int:
        """Index of the first message (from `after` on) with key=value."""
        deadline = time.monotonic() + timeout
        while True:
            for i in range(after, len(self.messages)):
                if self.messages[i].get(key) == value:
                    return i
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key}={value} within {timeout}s: {self.messages}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            self.messages.append(dict(line.split("=", 1) for line in data.decode().split("\n")))

    def close(self):
        self.sock.close()


@pytest.fixture
def systemd(monkeypatch):
    listener = SystemdListener()
    monkeypatch.setenv("NOTIFY_SOCKET", listener.name)
    monkeypatch.setenv("WATCHDOG_USEC", "400000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield listener
    listener.close()


@pytest.fixture
def own_broker(tmp_path, request):
    started = []

    def make(overrides=None, **kw):
        # one worker: these tests find "worker 0" in the log (several workers:
        # tests/integration/test_multiworker.py)
        overrides = {"num.workers": 1, **(overrides or {})}
        b = h.Broker(tmp_path / f"b{len(started)}", overrides, name=f"supervised{len(started)}", **kw)
        started.append(b)
        if not hasattr(request.node, "_brokers"):
            request.node._brokers = []
        request.node._brokers.append((b, 0))
        return b

    yield make
    for b in started:
        if b.is_alive():
            b.kill()


def worker_pids(b) -> list[int]:
    return [int(m) for m in SERVING.findall(b.log_path.read_bytes())]


def wait_new_worker(b, old: int, timeout: float) -> int:
    """The pid of the worker that replaced `old`, once the broker answers again."""
    def new_pid():
        pids = worker_pids(b)
        return pids[-1] if pids and pids[-1] != old else None
    new = h.wait_until(new_pid, timeout, "a new worker", b, step=0.05)
    b.wait_ready(timeout=timeout)
    return new


def produce(b, topic: str, values: list[bytes]) -> None:
    p, dt = h.producer(b.bootstrap, acks="all"), h.DeliveryTracker()
    for v in values:
        p.produce(topic, value=v, on_delivery=dt)
    h.flush(p)
    assert not dt.errors, dt.errors[:3]


def read_values(b, topic: str, n: int) -> list[bytes]:
    c = h.consumer(b.bootstrap)
    try:
        h.assign_from_beginning(c, topic, 1)
        return [m.value() for m in h.consume(c, n, timeout=20)]
    finally:
        c.close()


def test_ready_watchdog_then_sigterm_stops_cleanly(own_broker, systemd):
    b = own_broker({"log.flush.interval.messages": 1}).start()
    ready = systemd.wait_for("READY")
    assert "STATUS" in systemd.messages[ready]
    first = systemd.wait_for("WATCHDOG", after=ready)
    systemd.wait_for("WATCHDOG", after=first + 1, timeout=2)
    produce(b, "sup-stop", [b"a", b"b"])
    assert b.stop(timeout=20) == 0
    systemd.wait_for("STOPPING", timeout=1)
    assert (b.data_dir / "sup-stop-0" / ".kafka_cleanshutdown").exists()
    b.start()
    assert read_values(b, "sup-stop", 2) == [b"a", b"b"]


def test_workers_run_on_uvloop(own_broker):
    b = own_broker().start()
    line = h.wait_until(lambda: re.search(rb"worker 0 \(pid \d+\) serving on .*", b.log_path.read_bytes()),
                        20, "the serving line", b, step=0.05)
    assert line.group(0).endswith(b"(event loop: uvloop)"), line.group(0)


def test_workers_are_pinned_to_cpus_only_when_asked(own_broker):
    """worker.cpu.affinity is off by default: every worker may run on every CPU the
    broker may use; set, worker i runs on the i-th of them only."""
    cpus = sorted(os.sched_getaffinity(0))
    serving = re.compile(rb"worker (\d+) \(pid (\d+)\) serving on")

    def affinities(b) -> dict[int, list[int]]:
        found = h.wait_until(lambda: (lambda m: m if len(m) >= 2 else None)(
            serving.findall(b.log_path.read_bytes())), 20, "two serving workers", b, step=0.05)
        return {int(w): sorted(os.sched_getaffinity(int(pid))) for w, pid in found}
    b = own_broker({"num.workers": 2}).start()
    assert affinities(b) == {0: cpus, 1: cpus}
    b.stop()
    b = own_broker({"num.workers": 2, "worker.cpu.affinity": "true"}).start()
    assert affinities(b) == {0: [cpus[0]], 1: [cpus[1 % len(cpus)]]}


def test_killed_worker_is_respawned_and_serves_its_partitions(own_broker):
    b = own_broker({"log.flush.interval.messages": 1}).start()
    produce(b, "sup-respawn", [b"x%d" % i for i in range(10)])
    (old,) = worker_pids(b)
    supervisor = b.proc.pid
    os.kill(old, signal.SIGKILL)
    wait_new_worker(b, old, timeout=10)
    assert b.proc.poll() is None and b.proc.pid == supervisor
    produce(b, "sup-respawn", [b"after"])
    assert read_values(b, "sup-respawn", 11)[-2:] == [b"x9", b"after"]
    assert b"respawning" in b.log_path.read_bytes()


def test_hung_worker_is_killed_and_replaced(own_broker):
    b = own_broker({"worker.heartbeat.timeout.ms": 1000}).start()
    (old,) = worker_pids(b)
    os.kill(old, signal.SIGSTOP)
    try:
        wait_new_worker(b, old, timeout=10)
    finally:
        try:
            os.kill(old, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert b"no heartbeat" in b.log_path.read_bytes()     # replaced for being hung
    h.api_versions_v0(b.bootstrap)


def test_worker_that_cannot_boot_stops_the_crash_loop(own_broker):
    b = own_broker().start()
    produce(b, "sup-broken", [b"v"])
    assert b.stop() == 0
    part = b.data_dir / "sup-broken-0"
    shutil.rmtree(part)
    part.write_text("not a partition directory\n")   # every boot of the worker fails here
    b.write_config()
    proc = subprocess.run(b.command(), cwd=b.workdir, capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(h.REPO_ROOT)})
    assert proc.returncode == 1, proc.stderr.decode()[-2000:]
    # an unusable partition directory fails the log dir: the broker stops at once
    # (Kafka halts when no log dir is left) instead of respawning the worker
    assert b"its log dir failed" in proc.stderr and b"sup-broken-0" in proc.stderr


def test_sighup_reloads_dynamic_config(own_broker, systemd):
    from confluent_kafka.admin import ConfigResource, ResourceType
    b = own_broker().start()
    ready = systemd.wait_for("READY")
    resource = ConfigResource(ResourceType.BROKER, "1")

    admin = h.admin(b.bootstrap)

    def retention():
        res = admin.describe_configs([resource], request_timeout=15)
        return res[resource].result(15)["log.retention.ms"].value

    assert retention() != "1234567"
    with open(b.config_path, "a") as f:
        f.write("log.retention.ms=1234567\nnum.network.threads=7\n")
    os.kill(b.proc.pid, signal.SIGHUP)
    reloading = systemd.wait_for("RELOADING", after=ready + 1)
    assert "MONOTONIC_USEC" in systemd.messages[reloading]
    systemd.wait_for("READY", after=reloading)
    assert retention() == "1234567"
    assert b"config reloaded" in b.log_path.read_bytes()
    assert b.is_alive()
    assert b.stop() == 0


def test_sigint_is_a_fast_stop(own_broker):
    b = own_broker().start()
    produce(b, "sup-int", [b"v"])
    b.proc.send_signal(signal.SIGINT)
    assert b.proc.wait(10) == 0
    b._reap_group()
    b._finish()
    assert (b.data_dir / "sup-int-0" / ".kafka_cleanshutdown").exists()


def test_unit_file_keys():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(UNIT)
    svc = unit["Service"]
    assert svc["Type"] == "notify"
    assert svc["Restart"] == "on-failure"
    assert int(svc["WatchdogSec"]) > 0
    # the worst case of a SIGTERM stop with the default config, cluster mode included
    # (controlled shutdown retries, then worker.shutdown.timeout.ms, then the controller)
    from mpbroker import config as configmod
    from mpbroker.supervisor import stop_budget_s
    cluster = configmod.BrokerConfig({"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181",
                                      "log.dirs": "/tmp/x"})
    assert stop_budget_s(cluster) == 155.0
    assert int(svc["TimeoutStopSec"]) >= stop_budget_s(cluster) + 10
    assert int(svc["TimeoutStartSec"]) >= 300   # >= worker.start.timeout.ms (300 s)
    assert int(svc["LimitNOFILE"]) >= 65536
    assert svc["KillMode"] == "mixed"
    assert "-HUP $MAINPID" in svc["ExecReload"]
    assert "serve" in svc["ExecStart"]


def test_unit_file_passes_systemd_analyze_verify(tmp_path):
    require("systemd-analyze", None if shutil.which("systemd-analyze") else
            "not on PATH (Debian/Ubuntu package: systemd)")
    # verify checks that ExecStart's program exists: point it at this interpreter.
    text = UNIT.read_text()
    exe = re.search(r"^ExecStart=(\S+)", text, re.M).group(1)
    unit = tmp_path / "mpbroker.service"
    unit.write_text(text.replace(exe, sys.executable))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)
    problems = [l for l in (proc.stdout + proc.stderr).splitlines()
                if "mpbroker.service" in l or "Unknown" in l]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr


def test_second_broker_on_a_taken_port_refuses_to_start(broker, tmp_path):
    """SO_REUSEPORT must not let a second broker share a port another broker listens on
    (the kernel would spread connections over both); it fails like Kafka's bind would."""
    if broker.external:
        pytest.skip("the port of an external broker is not ours to probe")
    other = h.Broker(tmp_path / "second", name="second-broker", port=broker.port)
    other.write_config()
    proc = subprocess.run(other.command(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"cannot listen on 127.0.0.1:{broker.port}" in proc.stderr
    assert "in use" in proc.stderr.lower()
    assert broker.is_alive()
