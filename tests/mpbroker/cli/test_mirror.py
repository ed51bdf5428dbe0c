"""`mpbroker mirror` arguments and configuration errors: exit 2 with one line on stderr,
before any client is made (in-process, no cluster needed)."""
from __future__ import annotations

import pytest

from mpbroker.cli.main import main

GOOD = ("clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\n"
        "A->B.enabled = true\n")


@pytest.mark.parametrize("text, words", [
    ("clusters = A, B\nA->B.enabled = true\nA.bootstrap.servers = x:1\n", "B.bootstrap.servers"),
    (GOOD + "exactly.once.support = sometimes\n", "exactly.once.support"),
    (GOOD.replace("A->B.enabled = true", "A->B.enabled = false"), "no replication flow"),
])
def test_config_errors_exit_2_with_one_line(tmp_path, capsys, text, words):
    p = tmp_path / "mm2.properties"
    p.write_text(text)
    assert main(["mirror", "-c", str(p)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and err.startswith("mpbroker mirror: ")


def test_missing_file_and_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["mirror", "-c", str(tmp_path / "nope.properties")]) == 2
    assert "cannot read" in capsys.readouterr().err
    p = tmp_path / "mm2.properties"
    p.write_text(GOOD)
    assert main(["mirror", "-c", str(p), "--workers", "0"]) == 2
    assert main(["mirror", "-c", str(p), "--clusters", "C"]) == 2
    assert "--clusters" in capsys.readouterr().err
    assert main(["mirror", "-c", str(p), "--metrics-listener", "127.0.0.1"]) == 2
    assert "--metrics-listener" in capsys.readouterr().err


def test_a_librdkafka_setting_it_rejects_is_a_config_error(tmp_path, capsys):
    p = tmp_path / "mm2.properties"
    p.write_text(GOOD + "A.consumer.no.such.setting = 1\n")
    assert main(["mirror", "-c", str(p)]) == 2
    err = capsys.readouterr().err
    assert "no.such.setting" in err and err.count("\n") == 1
