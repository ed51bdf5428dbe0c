"""Cluster-mode test harness: a real ZooKeeper server and N real mpbroker processes.

* `ZooKeeperServer(workdir)`: Debian's `zookeeper` package (`/usr/share/java/zookeeper.jar`,
  java) run as `org.apache.zookeeper.server.ZooKeeperServerMain <zoo.cfg>` on 127.0.0.1 and
  a free port, its own data dir, `tickTime=500` (so session timeouts from 1 s to 30 s are
  allowed); `.connect` is "127.0.0.1:<port>"; `.stop()` kills it. Start it once per session.
* `Cluster(zk, workdir, n, chroot, overrides)`: brokers 1..n, each a
  `tests.integration.broker.Broker` (`mpbroker serve` with `zookeeper.connect=<zk>/<chroot>`,
  `broker.id`, `num.workers=2`, own port and data dir, 127.0.0.1), started together.
  Operations by broker id: `kill(i)` (SIGKILL the group), `stop(i)` (SIGTERM: controlled
  shutdown), `pause(i)`/`resume(i)` (SIGSTOP/SIGCONT the group), `restart(i)`,
  `start(i)`. Views: `zk_client()` (kazoo on the chroot), `controller()` -> (id, epoch)
  from ZooKeeper, `state(topic, p)` (the partition state znode), `live_ids()`,
  `wait_for(pred, timeout, what)`, `bootstrap` (every running broker).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.integration.broker import Broker, free_port

ZK_JAR = "/usr/share/java/zookeeper.jar"
ZK_CONF = "/etc/zookeeper/conf"


def zookeeper_available() -> str | None:
    """None when a ZooKeeper server can run here, else why not."""
    if not os.path.exists(ZK_JAR):
        return f"{ZK_JAR} missing (apt-get install zookeeper)"
    from shutil import which
    if which("java") is None:
        return "java missing"
    return None


class ZooKeeperServer:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text("\n".join([
            "tickTime=500", f"dataDir={data}", f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1", "minSessionTimeout=1000", "maxSessionTimeout=30000",
            "admin.enableServer=false", "maxClientCnxns=0", "4lw.commands.whitelist=ruok,stat",
        ]) + "\n")
        cp = f"{ZK_CONF}:{ZK_JAR}"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", f"-Dzookeeper.log.dir={self.workdir}", "-cp", cp,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        from kazoo.client import KazooClient
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited ({self.proc.returncode}): "
                                   f"{self.log_path.read_text()[-3000:]}")
            zk = KazooClient(self.connect, timeout=2)
            try:
                zk.start(timeout=1)
                zk.stop()
                return self
            except Exception:
                time.sleep(0.2)
            finally:
                zk.close()
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start on {self.connect}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


class Cluster:
    def __init__(self, zk: ZooKeeperServer, workdir: Path, n: int = 3, chroot: str = "/cluster",
                 overrides: dict | None = None, *, start: bool = True):
        self.zk_server = zk
        self.workdir = Path(workdir)
        self.chroot = chroot
        self.connect = f"{zk.connect}{chroot}"
        self.overrides = {
            "zookeeper.connect": self.connect,
            "zookeeper.session.timeout.ms": 4000,
            "zookeeper.connection.timeout.ms": 10000,
            "num.workers": 2,
            "worker.cpu.affinity": "false",
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.num.partitions": 3,
            "controlled.shutdown.retry.backoff.ms": 500,
            "default.replication.factor": 1,
            **{k: str(v) for k, v in (overrides or {}).items()}}
        self.brokers: dict[int, Broker] = {}
        for i in range(1, n + 1):
            self.add(i)
        self._zk = None
        if start:
            self.start_all()

    def add(self, broker_id: int, overrides: dict | None = None) -> Broker:
        ov = dict(self.overrides)
        ov["broker.id"] = broker_id
        ov.update(overrides or {})
        b = Broker(self.workdir / f"b{broker_id}", ov, name=f"broker{broker_id}")
        self.brokers[broker_id] = b
        return b

    def start_all(self) -> None:
        # start the processes together (ZooKeeper registration is what makes them a cluster)
        procs = list(self.brokers.values())
        for b in procs:
            b.start()
        self.wait_for(lambda: set(self.live_ids()) >= set(self.brokers), 30, "all brokers registered")

    # -- process operations
    def start(self, i: int) -> Broker:
        return self.brokers[i].start()

    def kill(self, i: int) -> None:
        self.brokers[i].kill()

    def stop(self, i: int, timeout: float = 60.0) -> int | None:
        return self.brokers[i].stop(timeout)

    def pause(self, i: int) -> None:
        os.killpg(self.brokers[i].proc.pid, signal.SIGSTOP)

    def resume(self, i: int) -> None:
        os.killpg(self.brokers[i].proc.pid, signal.SIGCONT)

    def restart(self, i: int, hard: bool = False) -> Broker:
        return self.brokers[i].restart(hard=hard)

    def close(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                try:
                    os.killpg(b.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                b.kill()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()

    # -- views
    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.is_alive())

    def zk_client(self):
        if self._zk is None:
            from kazoo.client import KazooClient
            self._zk = KazooClient(self.connect, timeout=10)
            self._zk.start(timeout=10)
        return self._zk

    def live_ids(self) -> list[int]:
        zk = self.zk_client()
        if not zk.exists("/brokers/ids"):
            return []
        return sorted(int(x) for x in zk.get_children("/brokers/ids"))

    def controller(self) -> tuple[int, int]:
        """(controller broker id or -1, controller epoch or 0) from ZooKeeper."""
        zk = self.zk_client()
        try:
            cid = json.loads(zk.get("/controller")[0])["brokerid"]
        except Exception:
            cid = -1
        try:
            epoch = int(zk.get("/controller_epoch")[0])
        except Exception:
            epoch = 0
        return cid, epoch

    def state(self, topic: str, partition: int) -> dict | None:
        zk = self.zk_client()
        try:
            data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        except Exception:
            return None
        d = json.loads(data)
        d["zk_version"] = stat.version
        return d

    def wait_for(self, pred, timeout: float = 30.0, what: str = "condition", interval: float = 0.1):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = pred()
            except Exception as e:          # a view that is not there yet
                last = e
                last_ok = False
            else:
                last_ok = bool(last)
            if last_ok:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    def logs(self) -> str:
        return "\n".join(f"===== {b.name}\n{b.log_tail(6000)}" for b in self.brokers.values())
