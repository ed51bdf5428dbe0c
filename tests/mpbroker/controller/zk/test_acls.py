"""Kafka's ZooKeeper ACL layout and JSON (zk/acls.py), without a server."""
import json

from mpbroker.controller.zk.acls import acls_json, change_json, parse_acls, resource_path
from mpbroker.security.acl import (ALLOW, DENY, GROUP, LITERAL, PREFIXED, READ, TOPIC, WRITE,
                                   AclBinding)


def test_paths_json_and_notifications_are_kafkas():
    lit = AclBinding(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
    pre = AclBinding(GROUP, "app-", PREFIXED, "User:bob", "10.0.0.1", WRITE, DENY)
    assert resource_path(lit) == "/kafka-acl/Topic/orders"
    assert resource_path(pre) == "/kafka-acl-extended/prefixed/Group/app-"
    assert json.loads(acls_json([lit])) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert parse_acls(acls_json([pre]), GROUP, "app-", PREFIXED) == [pre]
    assert change_json(lit) == b"Topic:orders"
    assert json.loads(change_json(pre)) == {"version": 1, "resourceType": "Group", "name": "app-",
                                            "patternType": "PREFIXED"}
