"""InitProducerId (key 22), v0-v5, without a transactional id (idempotent producers).

A new producer gets a fresh id (from blocks the controller hands out, so ids never
repeat across restarts) and epoch 0. v3+ may send its current id and epoch to bump the
epoch after an error (KIP-360): the same id comes back with epoch + 1, or a new id when
the epoch would overflow. A request naming a transactional id is routed to the worker
coordinating it and answered by its transaction coordinator
(`broker.transactions.init_producer_id`, workers/txn/service.py: epoch bump, fencing of
an ongoing transaction, producer id rotation, KIP-360 checks)."""
from mpbroker.protocol.errors import ErrorCode

MAX_EPOCH = 32767


async def handle(broker, ctx, req):
    resp = {"throttle_time_ms": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
    if req.get("transactional_id") is not None:
        txn = getattr(broker, "transactions", None)
        if txn is None:
            resp["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return resp
        return await txn.init_producer_id(ctx, req)
    pid, epoch = req.get("producer_id", -1), req.get("producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        resp["producer_id"], resp["producer_epoch"] = pid, epoch + 1
        return resp
    resp["producer_id"] = await broker.next_producer_id()
    resp["producer_epoch"] = 0
    return resp
