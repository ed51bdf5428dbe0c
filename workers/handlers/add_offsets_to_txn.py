"""AddOffsetsToTxn (key 25), v0-v4: adds the group's `__consumer_offsets` partition to
the producer's transaction (the offsets topic is created first if missing), so that
EndTxn also writes the marker there and the TxnOffsetCommit offsets become visible (or
vanish). A fenced epoch answers PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH
before. Routed to the worker coordinating the transactional id."""
from mpbroker.protocol import api_keys

from workers.handlers._txn import for_version, service


async def handle(broker, ctx, req):
    txn, code = service(broker)
    if txn is not None:
        code = await txn.add_offsets(req["transactional_id"], req["producer_id"],
                                     req["producer_epoch"], req["group_id"])
    return {"throttle_time_ms": 0, "error_code": for_version(api_keys.ADD_OFFSETS_TO_TXN,
                                                             ctx.api_version, code)}
