"""A pytest plugin that runs a real mpbroker for your tests: Kafka without a JVM or Docker.

Enable it with `-p mpbroker.testing`, or `pytest_plugins = ["mpbroker.testing"]` in
your root `conftest.py` (it is also registered under the `pytest11` entry point
`mpbroker.testing`, so an installed mpbroker makes it available on its own). Fixtures:

* `mpbroker_broker` (session scope): the bootstrap address (`"127.0.0.1:PORT"`) of one
  broker started for the whole test session, on a free loopback port, with its data in
  a temporary directory. Override the `mpbroker_overrides` fixture (session scope,
  a dict of config keys) in your conftest to configure it.
* `mpbroker_factory` (function scope): `make(overrides=None) -> MpBroker`, a private
  broker per call (e.g. for restarts: `b.stop()`, `b.start()` keeps its port and data),
  stopped when the test ends.

    def test_roundtrip(mpbroker_broker):
        p = confluent_kafka.Producer({"bootstrap.servers": mpbroker_broker})
        ...

Each broker is `python -m mpbroker.cli.main serve` in its own process group (stopped
with SIGTERM, then SIGKILL after `stop_timeout`), so it is the same broker as in
production, config keys are Kafka's, and anything a test leaves behind dies with the
fixture. Defaults differ from a production config only where tests want it:
`num.workers=1` (one worker process starts fast) and `group.initial.rebalance.delay.ms=0`
(as in Kafka's own test harnesses). A broker is ready when it answers an ApiVersions
request; if it exits first or takes longer than `start_timeout`, the fixture fails with
the tail of the broker's log (`<workdir>/broker.log`).
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
from typing import Dict, List, Optional

import pytest

TEST_DEFAULTS = {"num.workers": "1", "group.initial.rebalance.delay.ms": "0"}
_ROOT = str(Path(__file__).resolve().parents[1])       # the directory holding mpbroker/


class BrokerStartError(RuntimeError):
    pass


_GIVEN: set[int] = set()


def free_port() -> int:
    """A port free now on 127.0.0.1 and not handed out before by this process: the
    kernel may give the same free port to two calls in a row (nothing is bound on the
    first yet), and a broker told to listen twice on one port refuses to start."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            break
    _GIVEN.add(port)
    return port


def api_versions_answered(s) -> bool:
    """One ApiVersions v0 request (api key 18, header v1) on the connected socket `s`
    (plain or TLS), and a response with our id."""
    header = struct.pack(">hhih", 18, 0, 1, 14) + b"mpbroker-ready"
    s.sendall(struct.pack(">i", len(header)) + header)
    data = b""
    while len(data) < 8:
        chunk = s.recv(8 - len(data))
        if not chunk:
            return False
        data += chunk
    return struct.unpack(">ii", data)[1] == 1


def _api_versions_answers(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return api_versions_answered(s)
    except OSError:
        return False


def serve_command(config_path, overrides: Dict[str, object]) -> List[str]:
    """`python -m mpbroker.cli.main serve -c CONFIG --override k=v ...`."""
    cmd = [sys.executable, "-m", "mpbroker.cli.main", "serve", "-c", str(config_path)]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    return cmd


def spawn(cmd: List[str], cwd, log) -> subprocess.Popen:
    """`cmd` in a process group of its own (see `kill_group`), this mpbroker first on its
    PYTHONPATH, unbuffered, stdout and stderr to the open file `log`."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)


def kill_group(proc: Optional[subprocess.Popen]) -> None:
    """SIGKILL `proc`'s whole process group (supervisor, workers, controller)."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_and_wait(proc: Optional[subprocess.Popen], timeout: float = 10.0) -> Optional[int]:
    """`kill_group`, then wait up to `timeout` for `proc`; its exit code (None: none yet)."""
    if proc is None:
        return None
    kill_group(proc)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    return proc.returncode


class MpBroker:
    """One mpbroker process on 127.0.0.1 with its data under `workdir`."""

    def __init__(self, workdir: Path, overrides: Optional[Dict[str, object]] = None, *,
                 start_timeout: float = 60.0, stop_timeout: float = 30.0):
        self.workdir = Path(workdir)
        self.overrides = {**TEST_DEFAULTS, **{k: str(v) for k, v in (overrides or {}).items()}}
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port = free_port()
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "server.properties"
        self.log_path = self.workdir / "broker.log"
        self.proc: Optional[subprocess.Popen] = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> List[str]:
        return serve_command(self.config_path, self.overrides)

    def start(self) -> "MpBroker":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}\n"
            f"log.dirs={self.data_dir}\n")
        with open(self.log_path, "ab") as log:
            self.proc = spawn(self.command(), self.workdir, log)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerStartError(f"mpbroker exited with code {self.proc.returncode} before it was "
                                       f"ready; log:\n{self.log_tail()}")
            if _api_versions_answers("127.0.0.1", self.port, 2.0):
                return self
            time.sleep(0.1)
        self.kill()
        raise BrokerStartError(f"mpbroker not ready at {self.bootstrap} after {self.start_timeout}s; "
                               f"log:\n{self.log_tail()}")

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> Optional[int]:
        """SIGTERM (a controlled shutdown) and wait; SIGKILL the process group after
        `stop_timeout`. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._kill_group()              # a child left behind must not outlive the test
        return self.proc.returncode

    def kill(self) -> Optional[int]:
        return kill_and_wait(self.proc)

    def _kill_group(self) -> None:
        kill_group(self.proc)

    def log_tail(self, limit: int = 8000) -> str:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return "(no log)"
        return data[-limit:].decode(errors="replace")

    def __repr__(self) -> str:
        return f"<MpBroker {self.bootstrap} alive={self.is_alive()}>"


@pytest.fixture(scope="session")
def mpbroker_overrides() -> Dict[str, object]:
    """Config keys for the session broker; override this fixture to change them."""
    return {}


@pytest.fixture(scope="session")
def mpbroker_broker(tmp_path_factory, mpbroker_overrides) -> str:
    """Bootstrap address of a broker shared by the test session."""
    b = MpBroker(tmp_path_factory.mktemp("mpbroker"), mpbroker_overrides)
    b.start()
    try:
        yield b.bootstrap
    finally:
        b.stop()


@pytest.fixture
def mpbroker_factory(tmp_path):
    """`make(overrides=None, **kw) -> MpBroker`: a private, started broker per call."""
    made: List[MpBroker] = []

    def make(overrides: Optional[Dict[str, object]] = None, **kw) -> MpBroker:
        b = MpBroker(tmp_path / f"mpbroker{len(made)}", overrides, **kw)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.stop()
