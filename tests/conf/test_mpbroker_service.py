"""The systemd unit and sysusers entry in conf/: `systemd-analyze security` rates the unit
below 3.0, `systemd-sysusers` accepts the user entry, and the broker runs under the
sandbox's effects as far as they can be had without systemd as PID 1 (this container
and CI have none, so `systemd-run` cannot apply the unit): no capabilities and
no_new_privs (setpriv), MemoryDenyWriteExecute (the kernel's PR_SET_MDWE, which refuses
W+X mappings as the unit's seccomp rule does), UMask=0027, and under strace every
system call it makes is one the unit's SystemCallFilter allows, every socket family one
RestrictAddressFamilies allows, and the workers still pin themselves."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import require
from tests.integration.broker import REPO_ROOT, api_versions_v0, free_port, wait_until

UNIT = REPO_ROOT / "conf" / "mpbroker.service"
SYSUSERS = REPO_ROOT / "conf" / "mpbroker.sysusers"


def need(tool: str, package: str) -> None:
    require(tool, None if shutil.which(tool) else f"not on PATH (Debian package: {package})")


def unit_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this interpreter (verify checks it exists)."""
    text = UNIT.read_text()
    exe = re.search(r"^ExecStart=(\S+)", text, re.M).group(1)
    unit = tmp_path / "mpbroker.service"
    unit.write_text(text.replace(exe, sys.executable))
    return unit


def directives(name: str) -> list[str]:
    return re.findall(rf"^{name}=(.*)$", UNIT.read_text(), re.M)


def test_security_exposure_is_below_3(tmp_path):
    need("systemd-analyze", "systemd")
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit_here(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for mpbroker\.service: (\d+\.\d+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) < 3.0, proc.stdout


def test_unit_verifies_and_names_its_state_directory(tmp_path):
    need("systemd-analyze", "systemd")
    proc = subprocess.run(["systemd-analyze", "verify", str(unit_here(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert directives("StateDirectory") == ["mpbroker"]
    assert directives("WorkingDirectory") == ["/var/lib/mpbroker"]
    assert directives("User") == ["mpbroker"]


def test_sysusers_entry_creates_the_user(tmp_path):
    need("systemd-sysusers", "systemd")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    proc = subprocess.run(["systemd-sysusers", f"--root={root}", str(SYSUSERS)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    users = [line.split(":") for line in (root / "etc" / "passwd").read_text().splitlines()]
    (user,) = [u for u in users if u[0] == "mpbroker"]
    assert user[5:] == ["/var/lib/mpbroker", "/usr/sbin/nologin"]
    assert any(line.startswith("mpbroker:") for line in (root / "etc" / "group").read_text().splitlines())


# ------------------------------------------------------------------ the sandbox's effects

def syscall_groups() -> dict[str, list[str]]:
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())
    return groups


def allowed_syscalls() -> set[str]:
    """The unit's SystemCallFilter lines: the first an allow list, later ~ lines deny."""
    groups = syscall_groups()

    def expand(item: str) -> set[str]:
        if not item.startswith("@"):
            return {item}
        return set().union(*(expand(m) for m in groups[item]))

    allowed: set[str] = set()
    for line in directives("SystemCallFilter"):
        if line.startswith("~"):
            for item in line[1:].split():
                allowed -= expand(item)
        else:
            for item in line.split():
                allowed |= expand(item)
    return allowed


WRAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:           # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    sys.exit(f"PR_SET_MDWE: errno {ctypes.get_errno()}")
os.umask(int(sys.argv[1], 8))
os.execv(sys.executable, [sys.executable] + sys.argv[2:])
"""


def mdwe_supported() -> str | None:
    r = subprocess.run([sys.executable, "-c", WRAPPER, "0022", "-c", "pass"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"the kernel refuses PR_SET_MDWE ({r.stderr.strip()})"


@pytest.mark.slow
@pytest.mark.integration
def test_broker_runs_under_the_sandbox_effects(tmp_path):
    need("strace", "strace")
    need("setpriv", "util-linux")
    need("systemd-analyze", "systemd")
    require("PR_SET_MDWE", mdwe_supported())
    from confluent_kafka import Consumer, Producer, TopicPartition
    (umask,) = directives("UMask")
    assert "AF_UNIX AF_INET AF_INET6" in directives("RestrictAddressFamilies")
    port = free_port()
    data = tmp_path / "data"
    conf = tmp_path / "server.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={data}\nnum.workers=2\n"
                    "worker.cpu.affinity=true\ngroup.initial.rebalance.delay.ms=0\n")
    trace = tmp_path / "trace.txt"
    log = open(tmp_path / "broker.log", "wb")
    cmd = ["setpriv", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all",
           "strace", "-f", "-C", "-qq", "-e", "signal=none", "-o", str(trace),
           sys.executable, "-c", WRAPPER, umask, "-m", "mpbroker.cli.main", "serve", "-c", str(conf)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1"),
                            start_new_session=True)
    try:
        def serving() -> bool:
            assert proc.poll() is None, (tmp_path / "broker.log").read_text()
            try:
                api_versions_v0(f"127.0.0.1:{port}", timeout=2.0)
                return True
            except (OSError, ConnectionError):
                return False
        wait_until(serving, 120, "the sandboxed broker to serve", step=0.2)
        import psutil
        supervisor = psutil.Process(proc.pid).children()[0]          # strace's tracee
        status = Path(f"/proc/{supervisor.pid}/status").read_text()
        assert re.search(r"^CapEff:\s+0+$", status, re.M) and re.search(r"^NoNewPrivs:\s+1$", status, re.M)

        topic = f"sandbox-{uuid.uuid4().hex[:6]}"
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        for i in range(10):
            p.produce(topic, value=b"v%d" % i)
        assert p.flush(60) == 0
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "sandbox",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got = []

        def read_up_to(n):
            end = time.monotonic() + 60
            while len(got) < n and time.monotonic() < end:
                m = c.poll(1.0)
                if m is not None and m.error() is None:
                    got.append(m.value())
        read_up_to(10)              # small records: read into the response (pread64, sendmsg)
        big = b"x" * (256 << 10)    # one over the inline limit: sent with sendfile
        p.produce(topic, value=big)
        assert p.flush(60) == 0
        read_up_to(11)
        c.commit(offsets=[TopicPartition(topic, 0, len(got))], asynchronous=False)
        c.close()
        assert got == [b"v%d" % i for i in range(10)] + [big]
        supervisor.send_signal(signal.SIGHUP)
        supervisor.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "broker.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()

    text = (tmp_path / "broker.log").read_text()
    assert "cannot pin" not in text and "Traceback" not in text, text
    assert "SIGHUP: config reloaded" in text
    lock_mode = (data / ".lock").stat().st_mode & 0o777
    assert lock_mode & int(umask, 8) == 0, oct(lock_mode)

    out = trace.read_text()
    used = set(re.findall(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+(?:\d+\s+)?(\w+)$", out, re.M)) - {"total"}
    assert {"sched_setaffinity", "sendfile", "pread64", "sendmsg", "pwrite64", "flock"} <= used, \
        sorted(used)
    refused = used - allowed_syscalls()
    assert not refused, f"system calls the unit's SystemCallFilter refuses: {sorted(refused)}"
    families = set(re.findall(r"\bsocket(?:pair)?\((AF_\w+)", out))
    assert families and families <= {"AF_UNIX", "AF_INET", "AF_INET6"}, families
    assert not re.search(r"PROT_WRITE\|PROT_EXEC|PROT_EXEC\|PROT_WRITE", out)
