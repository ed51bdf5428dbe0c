"""CreateAcls / DeleteAcls as the controllers apply them (controller/acl_ops.py)."""
from mpbroker.controller.acl_ops import create_acls, delete_acls
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.acl import (ALLOW, ANY, LITERAL, MATCH, PREFIXED, READ, TOPIC, UNKNOWN,
                                   WRITE, AclBinding, AclFilter)

A = AclBinding(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
P = AclBinding(TOPIC, "ord", PREFIXED, "User:alice", "*", WRITE, ALLOW)


def test_create_is_idempotent_and_refuses_invalid_items_alone():
    acls, res = create_acls((), [A, A._replace(principal="alice"), P, A])
    assert acls == tuple(sorted({A, P}))
    assert [r["error_code"] for r in res] == [0, ErrorCode.INVALID_REQUEST, 0, 0]
    assert "Could not parse principal" in res[1]["error_message"]


def test_delete_by_filters_reports_what_each_deleted():
    acls = (A, P)
    left, res = delete_acls(acls, [AclFilter(TOPIC, "orders", MATCH, operation=WRITE),
                                   AclFilter(pattern_type=UNKNOWN), AclFilter()])
    assert left == ()
    assert [m["resource_name"] for m in res[0]["matching_acls"]] == ["ord"]
    assert res[1]["error_code"] == ErrorCode.INVALID_REQUEST and res[1]["matching_acls"] == []
    assert [m["resource_name"] for m in res[2]["matching_acls"]] == ["orders"]
    assert delete_acls(acls, [AclFilter(TOPIC, "x", ANY)])[0] == tuple(sorted(acls))
