"""mpbroker/cli/admin.py: argument parsing, --command-config, one-line errors."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from mpbroker.cli import admin as A
from tests.mpbroker.cli.conftest import Cli, failed_one_line


def test_topic_partitions():
    assert A.topic_partitions(["a", "b:0,2", "c:1-3,7"]) == \
        [("a", None), ("b", [0, 2]), ("c", [1, 2, 3, 7])]
    for bad in (":1", "a:x", "a:1-"):
        with pytest.raises(A.CliError) as e:
            A.topic_partitions([bad])
        assert e.value.code == 2


def test_key_values_and_int_list():
    assert A.key_values(["a=1", "b=x=y", "c="], "--x") == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(A.CliError):
        A.key_values(["novalue"], "--x")
    assert A.int_list("1,2, 3", "--p") == [1, 2, 3]
    with pytest.raises(A.CliError):
        A.int_list("1,a", "--p")


def test_command_config_keys_go_to_the_library(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("# comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism = PLAIN\n"
                 "ssl.ca.location: /etc/ca.pem\nclient.id=ops\n")
    args = SimpleNamespace(bootstrap_server="h:1", command_config=str(f))
    conf = A.client_config(args, {"acks": "all"})
    assert {k: v for k, v in conf.items() if k != "logger"} == {
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "ssl.ca.location": "/etc/ca.pem", "client.id": "ops", "acks": "all"}


def test_table_alignment(capsys):
    A.table(["A", "LONGER"], [["xx", None], ["y", 3]])
    assert capsys.readouterr().out.splitlines() == ["A  LONGER", "xx -", "y  3"]


def test_unusable_command_config_exits_2(tmp_path):
    cli = Cli("127.0.0.1:1")          # refused before any connection is made
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.client.property=1\n")
    line = failed_one_line(cli("topics", "list", "--command-config", bad, check=False), 2)
    assert "no.such.client.property" in line
    line = failed_one_line(cli("topics", "list", "--command-config", tmp_path / "none",
                               check=False), 2)
    assert "cannot read --command-config" in line


def test_own_client_refuses_an_unusable_security_config(tmp_path):
    """DescribeLogDirs / ApiVersions / OffsetDelete go over the project's own client, which
    reads the same TLS/SASL properties: a missing CA file or SASL without credentials is 2."""
    for text, message in (("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n",
                           "ssl.ca.location=/nonexistent/ca.pem: cannot read"),
                          ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n",
                           "SASL needs sasl.username")):
        conf = tmp_path / "client.properties"
        conf.write_text(text)
        args = SimpleNamespace(bootstrap_server="h:1", command_config=str(conf), request_timeout_ms=1000)
        with pytest.raises(A.CliError) as e:
            A.wire_calls(args, "log-dirs", [("h", 1, 35, lambda v: {"topics": None})])
        assert e.value.code == 2 and message in str(e.value)


def test_unreachable_broker_is_one_line():
    cli = Cli("127.0.0.1:1")
    line = failed_one_line(cli("topics", "list", "--request-timeout-ms", 1000, check=False))
    assert "_TRANSPORT" in line and "127.0.0.1:1" in line
    line = failed_one_line(cli("log-dirs", "--request-timeout-ms", 1000, check=False))
    assert "127.0.0.1:1" in line
