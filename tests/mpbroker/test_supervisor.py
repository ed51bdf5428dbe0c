"""The arbiter (mpbroker/supervisor.py) with stand-in children: a mesh of two workers,
pinning, boot failures and crash loops, hung children, systemd notifications while
stopping, listener eviction. Its parts are tested beside their modules (test_ipc,
test_heartbeats, test_controller_rpc, test_config_reload)."""
from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import threading
import time
import uuid

import pytest

from mpbroker import sdnotify
from mpbroker.heartbeats import CS_DONE, READY
from mpbroker.supervisor import Child, Supervisor, stop_budget_s
from tests.conftest import broker_config
from workers.main import WORKER_BOOT_ERROR


# ------------------------------------------------------------------ the arbiter
def dummy_controller(cfg, channels, advertised, heartbeats, interval):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    while True:
        heartbeats.beat(0)
        time.sleep(interval)


def mesh_worker(out_dir):
    def target(cfg, wid, channels, listen, heartbeats, interval, grace_s):
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        for peer in channels.peers.values():
            peer.setblocking(True)
            peer.sendall(b"%d" % wid)
        heard = sorted(int(p.recv(16)) for p in channels.peers.values())
        (out_dir / f"w{wid}.json").write_text(json.dumps(
            {"peers": sorted(channels.peers), "heard": heard,
             "cpus": sorted(os.sched_getaffinity(0))}))
        heartbeats.beat(1 + wid)
        if wid == 0:
            while not (out_dir / "w1.json").exists():
                time.sleep(0.01)
            os.kill(os.getppid(), signal.SIGTERM)
        while not stop:
            heartbeats.beat(1 + wid)
            time.sleep(interval)
        return 0
    return target


def make_supervisor(cfg, worker_target=None, controller_target=dummy_controller,
                    notify_address=None) -> Supervisor:
    """A Supervisor of stand-in children on a loopback port 0 (systemd: `notify_address`)."""
    kw = {"worker_target": worker_target} if worker_target is not None else {}
    s = Supervisor(cfg, controller_target=controller_target,
                   notifier=sdnotify.Notifier(notify_address), **kw)
    s.bind("127.0.0.1", 0, "127.0.0.1", 0)
    return s


def run_supervisor(s: Supervisor, timeout: float = 20) -> int:
    alarm = threading.Timer(timeout, lambda: os.kill(os.getpid(), signal.SIGINT))
    alarm.start()
    try:
        return s.run()
    finally:
        alarm.cancel()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
@pytest.mark.parametrize("pin", [None, True])
def test_two_workers_get_a_mesh_and_cores_pinned_only_when_asked(tmp_path, monkeypatch, pin):
    """worker.cpu.affinity off (the default): every worker may use every core; on:
    worker i runs on the i-th core only."""
    more = {} if pin is None else {"worker.cpu.affinity": pin}
    cfg = broker_config(tmp_path, num_workers=2, **{"worker.heartbeat.timeout.ms": 2000}, **more)
    s = make_supervisor(cfg, mesh_worker(tmp_path))
    assert run_supervisor(s) == 0
    w0 = json.loads((tmp_path / "w0.json").read_text())
    w1 = json.loads((tmp_path / "w1.json").read_text())
    assert (w0["peers"], w0["heard"]) == ([1], [1])
    assert (w1["peers"], w1["heard"]) == ([0], [0])
    cores = sorted(os.sched_getaffinity(0))
    if pin:
        assert w0["cpus"] == [cores[0]] and w1["cpus"] == [cores[1]]
    else:
        assert w0["cpus"] == cores and w1["cpus"] == cores


def test_a_worker_that_never_boots_stops_the_supervisor(tmp_path, capsys):
    def broken(cfg, wid, *rest):
        return WORKER_BOOT_ERROR

    cfg = broker_config(tmp_path, **{"worker.boot.max.failures": 3})
    s = make_supervisor(cfg, broken)
    assert run_supervisor(s) == 1
    # every worker fails; whichever reaches the limit first stops the supervisor
    assert re.search(r"worker \d+ failed to boot 3 times in a row", capsys.readouterr().err)


def test_a_serving_worker_that_keeps_dying_is_a_crash_loop(tmp_path, capsys):
    """Deaths of workers that had served are respawned at once, until more than
    worker.restart.max of them fall within worker.restart.window.ms."""
    boots = tmp_path / "boots"

    def dies_after_serving(cfg, wid, channels, listen, heartbeats, interval, grace_s):
        with open(boots, "a") as f:
            f.write("x")
        heartbeats.beat(1 + wid)                  # READY: it served
        time.sleep(0.1)
        return 1

    cfg = broker_config(tmp_path, num_workers=1, **{"worker.restart.max": 3,
                                                   "worker.restart.window.ms": 60000})
    s = make_supervisor(cfg, dies_after_serving)
    assert run_supervisor(s) == 1
    assert "crash loop: 4 worker deaths within 60s" in capsys.readouterr().err
    assert boots.read_text() == "xxxx"            # 3 respawns, then the supervisor stopped


def test_a_respawned_worker_that_hangs_while_starting_is_killed(tmp_path, caplog):
    """worker.start.timeout.ms: the first incarnation serves and crashes, the respawn
    hangs before serving (it never beats) and is killed, the next one serves."""
    boots = tmp_path / "boots"

    def target(cfg, wid, channels, listen, heartbeats, interval, grace_s):
        with open(boots, "a") as f:
            f.write(f"{os.getpid()}\n")
        n = len(boots.read_text().split())
        if n == 2:
            time.sleep(60)                        # hung while starting
            return 0
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        heartbeats.beat(1 + wid)
        if n == 1:
            time.sleep(0.2)
            return 1                              # a serving worker crashes
        os.kill(os.getppid(), signal.SIGTERM)
        while not stop:
            heartbeats.beat(1 + wid)
            time.sleep(interval)
        return 0

    caplog.set_level("INFO", logger="mpbroker.supervisor")
    cfg = broker_config(tmp_path, num_workers=1, **{"worker.start.timeout.ms": 1000,
                                                   "worker.heartbeat.timeout.ms": 2000})
    s = make_supervisor(cfg, target)
    assert run_supervisor(s) == 0
    pids = [int(p) for p in boots.read_text().split()]
    assert len(pids) == 3, pids
    hung = pids[1]
    assert re.search(rf"worker 0 \(pid {hung}\) was killed by signal 9 \(did not serve within "
                     rf"1s of its start\) before it served \(boot failure 1 of 3\)", caplog.text), \
        caplog.text


# ------------------------------------------------------------------ systemd while stopping
class NotifyListener:
    """systemd's end of sd_notify: a real abstract datagram socket read by a thread."""

    def __init__(self):
        self.name = f"@mpbroker-sup-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + self.name[1:].encode())
        self.sock.settimeout(0.1)
        self.got: list[tuple[float, dict]] = []
        self.done = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.done.is_set():
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            self._add(data)

    def _add(self, data: bytes) -> None:
        self.got.append((time.monotonic(), dict(
            line.split("=", 1) for line in data.decode().split("\n"))))

    def close(self):
        """Stop the thread, then read what was sent and not read yet (a datagram is in
        the socket's queue once its sendto returned)."""
        self.done.set()
        self.t.join(2)
        self.sock.setblocking(False)
        while True:
            try:
                self._add(self.sock.recv(4096))
            except BlockingIOError:
                break
        self.sock.close()


def cs_controller(delay):
    """A controller whose controlled shutdown takes `delay` seconds (then CS_DONE)."""
    def target(cfg, channels, advertised, heartbeats, interval):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
        channels.control.setblocking(False)
        asked = None
        while True:
            try:
                if channels.control.recv(4096) and asked is None:
                    asked = time.monotonic()
            except BlockingIOError:
                pass
            done = asked is not None and time.monotonic() - asked > delay
            heartbeats.beat(0, CS_DONE if done else READY)
            time.sleep(interval)
    return target


def slow_stopping_worker(stop_s):
    """Serves, asks the supervisor to stop (SIGTERM), takes `stop_s` to stop."""
    def target(cfg, wid, channels, listen, heartbeats, interval, grace_s):
        stopped = []
        signal.signal(signal.SIGTERM, lambda *a: stopped.append(time.monotonic()))
        t0 = time.monotonic()
        asked = False
        while not stopped or time.monotonic() - stopped[0] < stop_s:
            heartbeats.beat(1 + wid)
            if not asked and time.monotonic() - t0 > 0.5:
                asked = True
                os.kill(os.getppid(), signal.SIGTERM)
            time.sleep(interval)
        return 0
    return target


def test_sigterm_says_stopping_first_and_feeds_the_watchdog_while_stopping(tmp_path, monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    listener = NotifyListener()
    cfg = broker_config(tmp_path, num_workers=1, **{
        "zookeeper.connect": "127.0.0.1:1", "controlled.shutdown.max.retries": 1,
        "controlled.shutdown.retry.backoff.ms": 100, "worker.heartbeat.timeout.ms": 2000})
    s = make_supervisor(cfg, slow_stopping_worker(1.0), cs_controller(1.0),
                        sdnotify.socket_address(listener.name))
    try:
        assert run_supervisor(s) == 0
    finally:
        listener.close()        # it reads the last datagrams, sent before the return
    msgs = listener.got
    keys = [m for _, m in msgs]
    ready = next(i for i, m in enumerate(keys) if m.get("READY") == "1")
    stopping = next(i for i, m in enumerate(keys) if m.get("STOPPING") == "1")
    assert ready < stopping
    # STOPPING=1 before anything of the stop, with the worst case of this config
    cs = next(i for i, m in enumerate(keys) if m.get("STATUS") == "controlled shutdown")
    assert stopping < cs
    assert keys[stopping]["STATUS"] == "SIGTERM: controlled shutdown"
    assert int(keys[stopping]["EXTEND_TIMEOUT_USEC"]) == int(stop_budget_s(cfg) * 1e6) \
        == int((30 + 5 + 1 * (0.1 + 35)) * 1e6)
    # the stop takes ~2 s (controlled shutdown 1 s, workers 1 s): the watchdog kept
    # being fed (every WATCHDOG_USEC / 2, 0.1 s) while stopping
    pings = [t for t, m in msgs[stopping:] if m.get("WATCHDOG") == "1"]
    assert len(pings) >= 8, keys[stopping:]


# ------------------------------------------------------------------ listener eviction
def test_a_worker_late_on_heartbeats_leaves_the_listener_group_and_rejoins(tmp_path, caplog):
    """Two workers' sockets in one SO_REUSEPORT group (as worker_listener makes them);
    check_listener takes the late one out (every new connection then lands on the
    other) and puts it back once it beats again."""
    s = make_supervisor(broker_config(tmp_path, num_workers=2))
    try:
        a, b = s.worker_listener(), s.worker_listener()
        for sock in (a, b):
            sock.listen(16)
            sock.setblocking(False)
        late = Child(1, "worker", 1, 2, None, 0.0, ready=True, listener=b)

        def landed(n=16):
            """Which socket accepted each of n new connections."""
            out = []
            for _ in range(n):
                c = socket.create_connection(s.listen, timeout=2)
                ready, _, _ = select.select([a, b], [], [], 2)
                got = []
                for sock in ready:          # a shut-down listener is "readable" too
                    try:
                        sock.accept()[0].close()
                    except OSError:         # EINVAL: out of the group
                        continue
                    got.append("a" if sock is a else "b")
                assert len(got) == 1, (ready, got)
                out.extend(got)
                c.close()
            return out

        assert set(landed()) == {"a", "b"}
        caplog.set_level("INFO", logger="mpbroker.supervisor")
        s.check_listener(late, now=10.0, age=2.0)           # under 3 s: stays
        assert late.evicted is None
        s.check_listener(late, now=10.0, age=3.5)
        assert late.evicted == 10.0
        assert "worker 1 missed heartbeats for 3500 ms: taken out of the listener group" \
            in caplog.text
        assert landed() == ["a"] * 16
        s.check_listener(late, now=12.0, age=0.4)           # beats again
        assert late.evicted is None and "worker 1 beats again after 2000 ms" in caplog.text
        assert set(landed()) == {"a", "b"}
    finally:
        for sock in list(s.held):
            sock.close()
        s.reserve.close()


def test_every_listener_is_reserved_and_advertised_with_the_first_leading(tmp_path):
    """Issue #17: bind() once per listener; the first is the inter-broker one
    (`listen`, `advertised`), `advertised.endpoints` lists them all, and a worker gets a
    socket of each (worker_listener(i)) in its own SO_REUSEPORT group."""
    s = make_supervisor(broker_config(tmp_path))
    try:
        port = s.bind("127.0.0.1", 0, "broker1.example", 0, "SSL", "SSL")
        assert tuple(s.advertised) == ("127.0.0.1", s.listen[1])
        assert s.advertised.endpoints == (("PLAINTEXT", "127.0.0.1", s.listen[1], "PLAINTEXT"),
                                          ("SSL", "broker1.example", port, "SSL"))
        plain, tls = s.worker_listener(0), s.worker_listener(1)
        assert plain.getsockname()[1] == s.listen[1] and tls.getsockname()[1] == port
    finally:
        for sock in list(s.held):
            sock.close()
        for b in s.bound:
            b.reserve.close()
