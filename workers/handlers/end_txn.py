"""EndTxn (key 26), v0-v4: commit or abort the producer's ongoing transaction.

The answer comes once PrepareCommit/PrepareAbort is in `__transaction_state`; the
markers and CompleteCommit/CompleteAbort follow in the background
(workers/txn/service.py). Retries of a finished EndTxn answer NONE, the opposite
decision INVALID_TXN_STATE, a retry while markers are being written
CONCURRENT_TRANSACTIONS. Routed to the worker coordinating the transactional id."""
from workers.handlers._txn import service


async def handle(broker, ctx, req):
    txn, code = service(broker)
    if txn is not None:
        code = await txn.end_txn(req["transactional_id"], req["producer_id"],
                                 req["producer_epoch"], bool(req["committed"]))
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
