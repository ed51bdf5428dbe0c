"""`mpbroker acls add|remove|list` against a broker with the ACL authorizer, with a
`--command-config` client properties file (Kafka's convention)."""
from __future__ import annotations

import json

import pytest

from tests.integration.broker import run_cli
from tests.security.acl_helpers import ANON, acl_broker

pytestmark = pytest.mark.integration


def test_add_list_remove(tmp_path):
    b = acl_broker(tmp_path / "b", **{"super.users": ANON})
    props = tmp_path / "client.properties"
    props.write_text("client.id=acl-cli\n")
    common = ["--bootstrap-server", b.bootstrap, "--command-config", str(props)]
    try:
        r = run_cli("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                    "--operation", "Describe", "--topic", "orders-", "--resource-pattern-type",
                    "prefixed", *common)
        assert r.returncode == 0, r.stderr
        assert r.stdout.decode().count("Adding ACL") == 2
        r = run_cli("acls", "add", "--deny-principal", "User:bob", "--operation", "IdempotentWrite",
                    "--cluster", *common)
        assert r.returncode == 0, r.stderr
        r = run_cli("acls", "list", "--topic", "orders-eu", "--resource-pattern-type", "match",
                    "--json", *common)
        got = json.loads(r.stdout)["acls"]
        assert {(a["principal"], a["operation"], a["pattern_type"]) for a in got} == {
            ("User:alice", "READ", "PREFIXED"), ("User:alice", "DESCRIBE", "PREFIXED")}
        r = run_cli("acls", "remove", "--allow-principal", "User:alice", "--topic", "orders-",
                    "--resource-pattern-type", "prefixed", *common)
        assert r.returncode == 0 and r.stdout.decode().count("Removed ACL") == 2, r.stderr
        r = run_cli("acls", "list", "--json", *common)
        assert [a["principal"] for a in json.loads(r.stdout)["acls"]] == ["User:bob"]
        r = run_cli("acls", "add", "--operation", "Read", "--topic", "t", *common)
        assert r.returncode == 2 and b"needs --allow-principal" in r.stderr
        r = run_cli("acls", "add", "--allow-principal", "alice", "--topic", "t", *common)
        assert r.returncode == 1 and b"Could not parse principal" in r.stderr, r.stderr
    finally:
        b.stop(timeout=20)
