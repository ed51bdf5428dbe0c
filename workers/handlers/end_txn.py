"""EndTxn (key 26), v0-v4: commit or abort the producer's ongoing transaction.

The answer comes once PrepareCommit/PrepareAbort is in `__transaction_state`; the
markers and CompleteCommit/CompleteAbort follow in the background
(workers/txn/service.py). Retries of a finished EndTxn answer NONE, the opposite
decision INVALID_TXN_STATE, a retry while markers are being written
CONCURRENT_TRANSACTIONS, a fenced epoch PRODUCER_FENCED from v2 on and
INVALID_PRODUCER_EPOCH before. v5 (KIP-890 part 2: the response carries the epoch bumped
at the end of every transaction) is not served; workers/txn/__init__.py says why.
Routed to the worker coordinating the transactional id."""
from mpbroker.protocol import api_keys

from workers.handlers._txn import for_version, service


async def handle(broker, ctx, req):
    txn, code = service(broker)
    if txn is not None:
        code = await txn.end_txn(req["transactional_id"], req["producer_id"],
                                 req["producer_epoch"], bool(req["committed"]))
    return {"throttle_time_ms": 0,
            "error_code": for_version(api_keys.END_TXN, ctx.api_version, code)}
