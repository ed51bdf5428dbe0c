"""DescribeAcls / CreateAcls / DeleteAcls handlers with a stand-in broker: describe
answers from the worker's metadata, grouped by resource; an UNKNOWN filter element is
INVALID_REQUEST; create and delete go to the controller."""
import asyncio
from types import SimpleNamespace

from mpbroker.controller import acl_ops
from mpbroker.metadata.model import ClusterMetadata, set_acls
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.acl import ALLOW, ANY, LITERAL, PREFIXED, READ, TOPIC, WRITE, AclBinding
from workers.handlers import create_acls, delete_acls, describe_acls

A = AclBinding(TOPIC, "orders", LITERAL, "User:a", "*", READ, ALLOW)
B = AclBinding(TOPIC, "orders", LITERAL, "User:b", "*", WRITE, ALLOW)
P = AclBinding(TOPIC, "ord", PREFIXED, "User:a", "*", WRITE, ALLOW)


def describe_req(**kw):
    return {"resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
            "principal_filter": None, "host_filter": None, "operation": ANY, "permission_type": ANY,
            **kw}


def test_describe_groups_by_resource_and_refuses_unknown_elements():
    broker = SimpleNamespace(metadata=set_acls(ClusterMetadata("c"), [A, B, P]))
    resp = describe_acls.handle(broker, None, describe_req())
    assert [(r["resource_name"], r["pattern_type"], len(r["acls"])) for r in resp["resources"]] == [
        ("ord", PREFIXED, 1), ("orders", LITERAL, 2)]
    resp = describe_acls.handle(broker, None, describe_req(principal_filter="User:b"))
    assert resp["resources"][0]["acls"] == [{"principal": "User:b", "host": "*", "operation": WRITE,
                                             "permission_type": ALLOW}]
    resp = describe_acls.handle(broker, None, describe_req(operation=0))
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST and resp["resources"] == []


class Controller:
    def __init__(self):
        self.acls = ()

    async def create_acls(self, bindings):
        self.acls, results = acl_ops.create_acls(self.acls, bindings)
        return results

    async def delete_acls(self, filters):
        self.acls, results = acl_ops.delete_acls(self.acls, filters)
        return results


def test_create_and_delete_go_to_the_controller():
    ctl = Controller()
    broker = SimpleNamespace(controller=ctl)
    creation = {"resource_type": TOPIC, "resource_name": "orders", "resource_pattern_type": LITERAL,
                "principal": "User:a", "host": "*", "operation": READ, "permission_type": ALLOW}
    resp = asyncio.run(create_acls.handle(broker, None, {"creations": [creation]}))
    assert resp["results"] == [{"error_code": 0, "error_message": None}] and ctl.acls == (A,)
    resp = asyncio.run(delete_acls.handle(broker, None, {"filters": [describe_req()]}))
    assert resp["filter_results"][0]["matching_acls"][0]["principal"] == "User:a" and ctl.acls == ()
