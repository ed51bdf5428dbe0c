"""InitProducerId (key 22), v0-v5.

Without a transactional id (idempotent producers) every request gets a fresh producer id
(from blocks the controller hands out, so ids never repeat across restarts) and epoch 0,
whatever producer id and epoch a v3+ request carries: as Kafka's TransactionCoordinator
does, the epoch of an id is never bumped on a client's word alone (anyone could fence
another producer's id that way); a KIP-360 idempotent producer that asks for a bump
simply continues under the new id. A request naming a transactional id is routed to the
worker coordinating it and answered by its transaction coordinator
(`broker.transactions.init_producer_id`, workers/txn/service.py: epoch bump, fencing of
an ongoing transaction, producer id rotation, KIP-360 checks); its PRODUCER_FENCED
becomes INVALID_PRODUCER_EPOCH below v4 (`_txn.for_version`)."""
from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode

from workers.handlers._txn import for_version


async def handle(broker, ctx, req):
    resp = {"throttle_time_ms": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
    if req.get("transactional_id") is not None:
        txn = getattr(broker, "transactions", None)
        if txn is None:
            resp["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return resp
        resp = await txn.init_producer_id(ctx, req)
        resp["error_code"] = for_version(api_keys.INIT_PRODUCER_ID, ctx.api_version,
                                         resp["error_code"])
        return resp
    resp["producer_id"] = await broker.next_producer_id()
    resp["producer_epoch"] = 0
    return resp
