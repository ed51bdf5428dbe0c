"""CreateAcls (key 30), v0-v3: the controller validates and stores the ACLs
(mpbroker/controller/acl_ops.py); one result per creation, in request order. v0 has no
pattern type (LITERAL). Without an authorizer the ACLs are stored all the same (Kafka
answers SECURITY_DISABLED there; storing lets an operator prepare ACLs before turning
the authorizer on)."""
from mpbroker.security.acl import binding_from_wire


async def handle(broker, ctx, req):
    bindings = [binding_from_wire(c) for c in req["creations"]]
    results = await broker.controller.create_acls(bindings) if bindings else []
    return {"throttle_time_ms": 0, "results": results}
