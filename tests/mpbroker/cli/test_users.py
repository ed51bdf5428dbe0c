"""`mpbroker users add|remove|list` against the real broker, and the offline bootstrap."""
from __future__ import annotations

import argparse
import json

import pytest

from mpbroker.cli.admin import CliError
from mpbroker.cli.users import scram_configs
from mpbroker.metadata.store import MetadataStore
from mpbroker.security import scram_credentials as sc
from tests.integration.broker import run_cli
from tests.mpbroker.cli.conftest import failed_one_line


def opts(**kw):
    base = {"add_config": None, "mechanism": None, "iterations": 4096}
    return argparse.Namespace(**{**base, **kw})


def test_scram_configs_from_the_options():
    assert scram_configs(opts()) == {m: {"iterations": 4096, "password": None} for m in sc.MECHANISMS}
    assert scram_configs(opts(mechanism=["SCRAM-SHA-512"], iterations=8192)) == \
        {"SCRAM-SHA-512": {"iterations": 8192, "password": None}}
    assert scram_configs(opts(add_config="SCRAM-SHA-256=[iterations=8192,password=a=b],"
                                         "SCRAM-SHA-512=[password=x]")) == {
        "SCRAM-SHA-256": {"iterations": 8192, "password": "a=b"},
        "SCRAM-SHA-512": {"iterations": 4096, "password": "x"}}
    with pytest.raises(CliError):
        scram_configs(opts(add_config="SCRAM-SHA-1=[password=x]"))


def test_add_list_remove(cli):
    out = cli("users", "add", "cli-alice", "--password", "s3cret").stdout_text
    assert "Added SCRAM credentials of user cli-alice: SCRAM-SHA-256, SCRAM-SHA-512" in out
    cli("users", "add", "cli-bob", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
        input="bob-pw\n")
    users = {u["user"]: u["credentials"] for u in cli.json("users", "list")["users"]}
    assert users["cli-alice"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                                  {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]
    assert users["cli-bob"] == [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    text = cli("users", "list", "cli-bob").stdout_text
    assert text.strip() == ("SCRAM credential configs for user-principal 'cli-bob' are "
                            "SCRAM-SHA-512=iterations=8192")
    cli("users", "remove", "cli-alice")
    cli("users", "remove", "cli-bob", "--mechanism", "SCRAM-SHA-512")
    names = {u["user"] for u in cli.json("users", "list")["users"]}
    assert not names & {"cli-alice", "cli-bob"}
    line = failed_one_line(cli("users", "remove", "cli-nobody", check=False))
    assert "RESOURCE_NOT_FOUND" in line
    line = failed_one_line(cli("users", "add", "cli-weak", "--password", "x", "--iterations", "10",
                               check=False))
    assert "UNACCEPTABLE_CREDENTIAL" in line


def test_offline_bootstrap(tmp_path):
    data = tmp_path / "data"
    conf = tmp_path / "server.properties"
    conf.write_text(f"broker.id=1\nlog.dirs={data}\nlisteners=PLAINTEXT://127.0.0.1:9\n")
    r = run_cli("users", "add", "admin", "--password", "pw", "--offline", "-c", str(conf),
                     "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["added"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    md = MetadataStore(str(data)).load()
    cred = md.scram_credential("admin", "SCRAM-SHA-256")
    assert cred == sc.credential_from_password(sc.SHA256, "pw", 4096, cred.salt)

