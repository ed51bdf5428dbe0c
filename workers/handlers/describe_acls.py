"""DescribeAcls (key 29), v0-v3: the ACLs matching the filter, grouped by resource
pattern, answered on the front from the worker's metadata (every ACL change is pushed
to every worker, as Kafka's brokers answer from their authorizer's cache). A filter
holding an UNKNOWN element is INVALID_REQUEST."""
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.acl import InvalidAcl, filter_from_wire, validate_filter


def handle(broker, ctx, req):
    f = filter_from_wire(req)
    try:
        validate_filter(f)
    except InvalidAcl as e:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": str(e), "resources": []}
    by_resource: dict = {}
    for b in broker.metadata.acls:
        if f.matches(b):
            by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(
                {"principal": b.principal, "host": b.host, "operation": b.operation,
                 "permission_type": b.permission})
    resources = [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                 for (t, n, p), acls in sorted(by_resource.items())]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": resources}
