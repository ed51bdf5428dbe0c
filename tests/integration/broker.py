"""Test harness: the real mpbroker process, and a minimal raw Kafka wire client.

`Broker` starts `python -m mpbroker.cli.main serve -c <tmp server.properties>
--override key=value ...` as a subprocess in its own process group, listening on
127.0.0.1 on a free port with a temporary data directory. It is ready when the port
accepts connections AND an ApiVersions v0 request (spoken here with a raw socket, not
with the project's own codec) gets an answer. stdout and stderr go to a log file that
the conftest prints when a test fails.

The raw helpers below (`frame_request`, `recv_frame`, `api_versions_v0`,
`build_record_batch`, `produce_v3`) encode the few messages the harness and the
bad-input tests need, field by field, independently of `mpbroker.protocol`, so the
tests do not check the broker's codec against itself.

Setting `MPBROKER_TEST_BOOTSTRAP=host:port` points every test at an already running
Kafka-compatible broker instead (used to validate the tests against a peer broker);
tests that need to stop, restart or reconfigure the broker are skipped then.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

# the broker process is started as the public pytest plugin starts it
from mpbroker.cli.main import admin_call
from mpbroker.testing import free_port, kill_and_wait, kill_group, serve_command, spawn

REPO_ROOT = Path(__file__).resolve().parents[2]
EXTERNAL_BOOTSTRAP_ENV = "MPBROKER_TEST_BOOTSTRAP"

API_VERSIONS = 18
PRODUCE = 0


def external_bootstrap() -> str | None:
    return os.environ.get(EXTERNAL_BOOTSTRAP_ENV) or None


# ---------------------------------------------------------------- waiting, the CLI

def wait_until(cond, timeout: float = 30.0, what: str = "condition", broker=None, *,
               step: float = 0.1):
    """Poll `cond` until it returns something true (returned); AssertionError after
    `timeout` seconds, with the tail of `broker`'s log when given."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                 + (f"; log:\n{broker.log_tail()}" if broker is not None else ""))
        time.sleep(step)


def cli_env(env: dict | None = None) -> dict:
    """`env` (default: this process's) with the repository first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_cli(*args, cwd=REPO_ROOT, timeout: float = 60, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
    """`python -m mpbroker.cli.main ARGS` as a subprocess (output captured; `kw` go to
    subprocess.run: input=, text=, ...)."""
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.main", *map(str, args)],
                          cwd=cwd, env=cli_env(env), capture_output=True, timeout=timeout, **kw)


# ---------------------------------------------------------------- raw wire protocol

def _str16(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def frame_request(api_key: int, api_version: int, correlation_id: int, body: bytes = b"",
                  client_id: str | None = "mpbroker-tests") -> bytes:
    """Size prefix + request header v1 (key, version, correlation id, client id) + body."""
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + _str16(client_id)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes:
    """One response frame without its size prefix (starts with the correlation id)."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    if size < 4 or size > 64 * 1024 * 1024:
        raise ConnectionError(f"bad response size {size}")
    return recv_exact(sock, size)


def connect(bootstrap: str, timeout: float = 5.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def parse_api_versions_v0(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """-> (correlation_id, error_code, {api_key: (min, max)}) from a v0-format body."""
    corr, err, n = struct.unpack_from(">ihi", frame, 0)
    pos, ranges = 10, {}
    for _ in range(max(n, 0)):
        key, lo, hi = struct.unpack_from(">hhh", frame, pos)
        ranges[key] = (lo, hi)
        pos += 6
    return corr, err, ranges


def api_versions_v0(bootstrap: str, timeout: float = 5.0) -> tuple[int, dict[int, tuple[int, int]]]:
    with connect(bootstrap, timeout) as sock:
        sock.sendall(frame_request(API_VERSIONS, 0, 7))
        corr, err, ranges = parse_api_versions_v0(recv_frame(sock))
        if corr != 7:
            raise ConnectionError(f"ApiVersions answered with correlation id {corr}")
        return err, ranges


def _varint(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)  # zigzag
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _varbytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def build_record_batch(records: list[tuple[bytes | None, bytes | None]], *, base_timestamp: int | None = None,
                       producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                       corrupt_crc: bool = False) -> bytes:
    """An uncompressed magic-v2 record batch (KIP-98 layout), base offset 0."""
    import crc32c

    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = b"\x00" + _varint(0) + _varint(i) + _varbytes(key) + _varbytes(value) + _varint(0)
        body += _varint(len(rec)) + rec
    after_crc = struct.pack(">hiqqqhii", 0, len(records) - 1, ts, ts, producer_id, producer_epoch,
                            base_sequence, len(records)) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    after_len = struct.pack(">ibI", 0, 2, crc) + after_crc  # leader epoch, magic, crc
    return struct.pack(">qi", 0, len(after_len)) + after_len


def produce_v3_body(topic: str, partition: int, records: bytes, acks: int = -1,
                    timeout_ms: int = 10000) -> bytes:
    return (_str16(None) + struct.pack(">hi", acks, timeout_ms) + struct.pack(">i", 1) + _str16(topic)
            + struct.pack(">i", 1) + struct.pack(">ii", partition, len(records)) + records)


def parse_produce_v3(frame: bytes) -> list[tuple[str, int, int, int]]:
    """-> [(topic, partition, error_code, base_offset)]"""
    pos = 4
    (nt,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    out = []
    for _ in range(nt):
        (tl,) = struct.unpack_from(">h", frame, pos)
        topic = frame[pos + 2:pos + 2 + tl].decode()
        pos += 2 + tl
        (np_,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(np_):
            part, err, base, _lat = struct.unpack_from(">ihqq", frame, pos)
            pos += 22
            out.append((topic, part, err, base))
    return out


# ---------------------------------------------------------------- the broker process

class BrokerStartError(RuntimeError):
    pass


class Broker:
    """The real mpbroker as a subprocess (or an external broker, see module doc)."""

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None, *,
                 port: int | None = None, name: str = "broker", start_timeout: float = 60.0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.start_timeout = start_timeout
        self.external = external_bootstrap()
        self.port = port or (int(self.external.rsplit(":", 1)[1]) if self.external else free_port())
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "server.properties"
        self.log_path = self.workdir / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self.starts = 0

    # -- addresses
    @property
    def host(self) -> str:
        return self.external.rsplit(":", 1)[0] if self.external else "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return self.external or f"127.0.0.1:{self.port}"

    # -- lifecycle
    def write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            "# written by tests/integration/broker.py",
            "broker.id=1",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={self.data_dir}",
            "num.partitions=1",
            "group.initial.rebalance.delay.ms=0",
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def command(self) -> list[str]:
        return serve_command(self.config_path, self.overrides)

    def start(self) -> "Broker":
        if self.external:
            self.wait_ready()
            return self
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        self.write_config()
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_file.write(f"\n===== start #{self.starts + 1}: {' '.join(self.command())}\n".encode())
        self.proc = spawn(self.command(), self.workdir, self._log_file)
        self.starts += 1
        _LIVE.add(self)
        try:
            self.wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BrokerStartError(f"{self.name} exited with code {self.proc.returncode} before it was "
                                       f"ready; log:\n{self.log_tail()}")
            try:
                api_versions_v0(self.bootstrap, timeout=2.0)
                return
            except (OSError, ConnectionError, struct.error) as e:
                last_err = e
                time.sleep(0.1)
        raise BrokerStartError(f"{self.name} not ready at {self.bootstrap} after {timeout or self.start_timeout}s "
                               f"({last_err!r}); log:\n{self.log_tail()}")

    def is_alive(self) -> bool:
        if self.external:
            return True
        return self.proc is not None and self.proc.poll() is None

    def _require_own(self, what: str) -> None:
        if self.external:
            pytest.skip(f"{what} needs our own broker process ({EXTERNAL_BOOTSTRAP_ENV} is set)")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (controlled shutdown) and wait; SIGKILL the group if it does not exit."""
        self._require_own("stop()")
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._log(f"===== did not stop within {timeout}s of SIGTERM: SIGKILL")
                self._kill_group()
                self.proc.wait(10)
        self._reap_group()
        return self._finish()

    def kill(self) -> int | None:
        """SIGKILL the whole process group at once (a crash: supervisor, workers, controller)."""
        if self.proc is None:
            return None
        kill_and_wait(self.proc)
        return self._finish()

    def restart(self, *, hard: bool = False) -> "Broker":
        """Stop (or kill -9 with hard=True) and start again on the same port and data dir."""
        self._require_own("restart()")
        self.kill() if hard else self.stop()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _port_in_use(self.port):
            time.sleep(0.1)
        return self.start()

    def _finish(self) -> int | None:
        rc = self.proc.returncode if self.proc else None
        self._log(f"===== exited with code {rc}")
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        _LIVE.discard(self)
        return rc

    def _kill_group(self) -> None:
        kill_group(self.proc)

    def _reap_group(self) -> None:
        """Children left behind after the supervisor exited are a bug, but must not linger."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        self._log("===== processes of the group still alive after the supervisor exited: SIGKILL")
        self.left_children = True
        self._kill_group()

    def _log(self, line: str) -> None:
        if self._log_file:
            try:
                self._log_file.write((line + "\n").encode())
            except ValueError:
                pass

    # -- logs
    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_text(self, since: int = 0, limit: int = 40000) -> str:
        if self.external:
            return f"(external broker {self.external}: no log)"
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                data = f.read()
        except FileNotFoundError:
            return "(no log)"
        if len(data) > limit:
            data = b"...[cut]...\n" + data[-limit:]
        return data.decode(errors="replace")

    def log_tail(self, limit: int = 8000) -> str:
        return self.log_text(max(0, self.log_size() - limit), limit)

    def parked_fetches(self) -> int:
        """Fetches parked in the purgatories of all the broker's workers (what `placement
        show` reports; our own broker only)."""
        self._require_own("parked_fetches()")
        info = admin_call(str(self.config_path), [f"{k}={v}" for k, v in self.overrides.items()],
                          {"cmd": "show", "interval": 0.05}, 30)
        return sum(w["purgatory"]["fetch"] for w in info["workers"])

    def wait_for_log(self, text: str, since: int = 0, timeout: float = 30.0) -> str:
        """Wait until `text` is in the log after byte `since` (a `log_size()` taken
        before); returns the log from there."""
        def seen():
            try:
                got = self.log_path.read_bytes()[since:].decode(errors="replace")
            except FileNotFoundError:
                return None
            return got if text in got else None
        return wait_until(seen, timeout, f"{text!r} in the log of {self.name}", self)

    def __repr__(self) -> str:
        return f"<Broker {self.name} {self.bootstrap} alive={self.is_alive()}>"


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


_LIVE: set[Broker] = set()


def kill_all() -> None:
    """atexit / session end: no broker outlives the test run."""
    for b in list(_LIVE):
        b.kill()


# ---------------------------------------------------------------- client helpers
# confluent-kafka helpers with a timeout on every call, shared by the client tests.

CLIENT_TIMEOUT_S = 30.0


class _FirstN(__import__("logging").Filter):
    """librdkafka retries a dead broker every few ms and logs each try: keep the first
    `limit` lines of each client (pytest shows them under "Captured log" on failure)."""

    def __init__(self, limit: int = 30):
        super().__init__()
        self.limit = limit
        self.seen = 0

    def filter(self, record) -> bool:
        self.seen += 1
        if self.seen == self.limit + 1:
            record.msg, record.args = "... (further librdkafka log lines of this client dropped)", ()
        return self.seen <= self.limit + 1


_client_seq = iter(range(1, 1 << 30))


def client_logger():
    import logging

    log = logging.getLogger(f"rdkafka.client{next(_client_seq)}")
    log.addFilter(_FirstN())
    return log


def common_conf(bootstrap: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10000,
        "broker.address.family": "v4",
        "logger": client_logger(),
    }


def admin(bootstrap: str, **conf):
    from confluent_kafka.admin import AdminClient

    return AdminClient({**common_conf(bootstrap), **conf})


def wait_for_topic(bootstrap: str, name: str, partitions: int | None = None,
                   timeout: float = CLIENT_TIMEOUT_S, present: bool = True) -> None:
    """Until Metadata shows the topic with `partitions` partitions that all have a leader
    (or, with present=False, until the topic is gone)."""
    a = admin(bootstrap)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = a.list_topics(timeout=5)
        t = md.topics.get(name)
        if not present:
            if t is None or t.error is not None:
                return
        elif t is not None and t.error is None and t.partitions:
            if (partitions is None or len(t.partitions) == partitions) and \
                    all(p.leader >= 0 for p in t.partitions.values()):
                return
        last = t
        time.sleep(0.1)
    raise TimeoutError(f"topic {name!r} not {'ready' if present else 'gone'} after {timeout}s: {last!r}")


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None,
                 timeout: float = CLIENT_TIMEOUT_S) -> str:
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)
    futs = a.create_topics([NewTopic(name, partitions, 1, config={k: str(v) for k, v in (config or {}).items()})],
                           operation_timeout=timeout, request_timeout=timeout)
    futs[name].result(timeout)
    wait_for_topic(bootstrap, name, partitions, timeout)
    return name


def producer(bootstrap: str, **conf):
    from confluent_kafka import Producer

    base = {**common_conf(bootstrap), "message.timeout.ms": 30000, "linger.ms": 5}
    base.update(conf)
    return Producer(base)


def consumer(bootstrap: str, **conf):
    """A consumer for assign(): confluent-kafka needs a group.id even then; no commits."""
    import uuid

    from confluent_kafka import Consumer

    base = {**common_conf(bootstrap), "group.id": f"assign-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000}
    base.update(conf)
    return Consumer(base)


class DeliveryTracker:
    """on_delivery callback that collects errors and (partition, offset) per message."""

    def __init__(self):
        self.errors: list = []
        self.delivered: list = []

    def __call__(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered.append((msg.partition(), msg.offset()))


def flush(p, timeout: float = CLIENT_TIMEOUT_S) -> None:
    left = p.flush(timeout)
    if left:
        raise TimeoutError(f"{left} messages not delivered after {timeout}s")


def consume(c, n: int, timeout: float = CLIENT_TIMEOUT_S, *, raise_errors: bool = True) -> list:
    """Poll until n messages arrived or the deadline passed; returns what arrived."""
    from confluent_kafka import KafkaError

    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        batch = c.consume(min(1000, n - len(out)), timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        for m in batch:
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() == KafkaError._PARTITION_EOF:
                continue
            elif raise_errors:
                raise RuntimeError(f"consume error: {err}")
    return out


def assign_from_beginning(c, topic: str, partitions: int) -> None:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])


# ---------------------------------------------------------------- fault-injecting proxy

class DropResponseProxy:
    """A TCP proxy on 127.0.0.1 that forwards Kafka frames both ways, except that the
    first `drops` responses to requests with `api_key` are swallowed and that client's
    connection is closed. The broker has carried the request out, the client never hears
    so and retries it: an unmodified client's real retry of the same batch.

    Start the broker with `advertised.listeners` pointing at `self.port` so that every
    connection of the client goes through the proxy."""

    def __init__(self, target_port: int, api_key: int = PRODUCE, drops: int = 1):
        import threading

        self.target_port = target_port
        self.api_key = api_key
        self.drops_left = drops
        self.dropped = 0
        self.forwarded: list[int] = []  # api keys of the requests seen
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            pending: dict[int, int] = {}
            threading.Thread(target=self._pump_requests, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._pump_responses, args=(upstream, client, pending), daemon=True).start()

    @staticmethod
    def _read_frame(sock: socket.socket) -> bytes:
        head = recv_exact(sock, 4)
        (size,) = struct.unpack(">i", head)
        return head + recv_exact(sock, size)

    def _pump_requests(self, src, dst, pending) -> None:
        try:
            while True:
                frame = self._read_frame(src)
                api_key, _ver, corr = struct.unpack_from(">hhi", frame, 4)
                pending[corr] = api_key
                self.forwarded.append(api_key)
                dst.sendall(frame)
        except (OSError, ConnectionError, struct.error):
            self._close_pair(src, dst)

    def _pump_responses(self, src, dst, pending) -> None:
        try:
            while True:
                frame = self._read_frame(src)
                (corr,) = struct.unpack_from(">i", frame, 4)
                api_key = pending.pop(corr, None)
                with self._lock:
                    drop = api_key == self.api_key and self.drops_left > 0
                    if drop:
                        self.drops_left -= 1
                        self.dropped += 1
                if drop:
                    self._close_pair(src, dst)
                    return
                dst.sendall(frame)
        except (OSError, ConnectionError, struct.error):
            self._close_pair(src, dst)

    @staticmethod
    def _close_pair(*socks) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        self._close_pair(*socks)
