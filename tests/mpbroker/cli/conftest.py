"""Fixtures of the admin CLI tests: the integration fixtures (the real broker process,
tests/integration/conftest.py) and `cli`, which runs `python -m mpbroker.cli.main`
as a subprocess against a broker."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# the fixtures, and the hook that attaches the broker's log to a failing test's report
from tests.integration.conftest import (broker, fresh_broker, make_topic,  # noqa: F401
                                        pytest_runtest_makereport, session_broker, topic_name)

REPO_ROOT = Path(__file__).resolve().parents[3]


class Cli:
    """`mpbroker ARGS --bootstrap-server B` as a subprocess; `json(...)` parses --json."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def __call__(self, *args, input: bytes | str | None = None, check: bool = True,
                 bootstrap: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "mpbroker.cli.main", *map(str, args)]
        if bootstrap:
            cmd += ["--bootstrap-server", self.bootstrap]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if isinstance(input, str):
            input = input.encode()
        r = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout, env=env,
                           cwd=REPO_ROOT)
        r.stdout_text = r.stdout.decode(errors="replace")
        r.stderr_text = r.stderr.decode(errors="replace")
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr_text}"
                                 f"\n{r.stdout_text}")
        return r

    def json(self, *args, **kw):
        return json.loads(self(*args, "--json", **kw).stdout)


def failed_one_line(r: subprocess.CompletedProcess, code: int = 1) -> str:
    """Asserts the command failed with `code` and one `mpbroker: ...` line, no traceback."""
    assert r.returncode == code, (r.returncode, r.stderr_text, r.stdout_text)
    lines = [ln for ln in r.stderr_text.splitlines() if ln.startswith("mpbroker:")]
    assert len(lines) == 1, r.stderr_text
    assert "Traceback" not in r.stderr_text, r.stderr_text
    return lines[0]


def wait_until(pred, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def cli(broker) -> Cli:
    return Cli(broker.bootstrap)
