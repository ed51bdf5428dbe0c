"""ControlledShutdown (key 7), v0-3. Cluster-scoped: a stopping broker asks the active
controller to move its leaderships to other ISR members and to drop it from the ISRs
(mpbroker/controller/zk/ `controlled_shutdown`). A broker that is not the active
controller answers NOT_CONTROLLER; the sender retries (controlled.shutdown.max.retries)."""
from mpbroker.protocol.errors import ErrorCode


async def handle(broker, ctx, req):
    broker_id = req.get("broker_id", -1)
    broker_epoch = req.get("broker_epoch", -1)
    try:
        code, remaining = await broker.controller.controlled_shutdown(broker_id, broker_epoch)
    except (ConnectionError, TimeoutError):
        code, remaining = ErrorCode.NOT_CONTROLLER, []
    return {"error_code": code,
            "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}
