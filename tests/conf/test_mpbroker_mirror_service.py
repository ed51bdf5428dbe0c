"""conf/mpbroker-mirror.service: it verifies, `systemd-analyze security` rates it below
3.0, its ExecStart is the `mpbroker mirror` command of conf/mm2.properties, and that
example config parses with no warning (this container has no systemd as PID 1, so the
unit itself is not started here; tests/integration/test_mirror.py runs the command)."""
from __future__ import annotations

import re
import subprocess
import sys

from mpbroker.mirror.config import MirrorConfig
from tests.conf.test_mpbroker_service import need
from tests.integration.broker import REPO_ROOT

UNIT = REPO_ROOT / "conf" / "mpbroker-mirror.service"
EXAMPLE = REPO_ROOT / "conf" / "mm2.properties"


def analyze(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`systemd-analyze ARGS <the unit, ExecStart pointing at this interpreter>`."""
    need("systemd-analyze", "systemd")
    text = UNIT.read_text()
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace(re.search(r"^ExecStart=(\S+)", text, re.M).group(1), sys.executable))
    return subprocess.run(["systemd-analyze", *args, str(unit)], capture_output=True, text=True,
                          timeout=60)


def test_unit_verifies(tmp_path):
    proc = analyze(tmp_path, "verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_security_exposure_is_below_3(tmp_path):
    out = analyze(tmp_path, "security", "--offline=true").stdout
    level = re.search(r"Overall exposure level for mpbroker-mirror\.service: (\d+\.\d+)", out)
    assert level and float(level.group(1)) < 3.0, out


def test_unit_runs_the_mirror_with_the_example_config_and_notifies():
    text = UNIT.read_text()
    assert re.search(r"^ExecStart=\S+ -m mpbroker\.cli\.main mirror -c /etc/mpbroker/mm2\.properties",
                     text, re.M)
    assert "Type=notify" in text and "RestartPreventExitStatus=2" in text
    cfg = MirrorConfig.from_file(str(EXAMPLE))
    assert [f.name for f in cfg.flows] == ["A->B"] and cfg.warnings == []
