"""Fixtures of the admin CLI tests: the integration fixtures (the real broker process,
tests/integration/conftest.py) and `cli`, which runs `python -m mpbroker.cli.main`
as a subprocess against a broker."""
from __future__ import annotations

import json
import subprocess

import pytest

# the fixtures, and the hook that attaches the broker's log to a failing test's report
from tests.integration.conftest import (broker, fresh_broker, make_topic,  # noqa: F401
                                        pytest_runtest_makereport, session_broker, topic_name)
from tests.integration.broker import run_cli, wait_until  # noqa: F401  (used by the CLI tests)


class Cli:
    """`mpbroker ARGS --bootstrap-server B` as a subprocess; `json(...)` parses --json."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def __call__(self, *args, input: bytes | str | None = None, check: bool = True,
                 bootstrap: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        if bootstrap:
            args = (*args, "--bootstrap-server", self.bootstrap)
        if isinstance(input, str):
            input = input.encode()
        r = run_cli(*args, input=input, timeout=timeout)
        r.stdout_text = r.stdout.decode(errors="replace")
        r.stderr_text = r.stderr.decode(errors="replace")
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, r.args))} exited {r.returncode}:\n{r.stderr_text}"
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


@pytest.fixture
def cli(broker) -> Cli:
    return Cli(broker.bootstrap)
