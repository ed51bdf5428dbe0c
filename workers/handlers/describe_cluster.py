"""DescribeCluster (key 60), v0-v2: brokers, controller and cluster id. v1 endpoint type
1 (brokers) is the only one a broker serves; 2 (controllers) gets UNSUPPORTED_ENDPOINT_TYPE.
v2 (KIP-1073) asks whether to include fenced brokers and marks each broker `is_fenced`:
the registered brokers are the live ones (a broker leaves the registry when it stops),
so none is fenced and `include_fenced_brokers` changes nothing."""
from mpbroker.protocol.errors import ErrorCode


def handle(broker, ctx, req):
    md = broker.metadata
    endpoint_type = req.get("endpoint_type", 1)
    resp = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "endpoint_type": endpoint_type, "cluster_id": md.cluster_id,
            "controller_id": md.controller_id, "brokers": [],
            "cluster_authorized_operations": -2147483648}
    if endpoint_type != 1:
        resp["error_code"] = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        resp["error_message"] = "The broker only handles broker endpoint types"
        return resp
    listener = getattr(ctx, "listener_name", None)
    resp["brokers"] = [{"broker_id": b.id, "host": a[0], "port": a[1], "rack": b.rack,
                        "is_fenced": False}
                       for b in md.brokers.values() for a in [b.address(listener)] if a is not None]
    return resp
