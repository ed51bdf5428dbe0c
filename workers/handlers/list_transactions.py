"""ListTransactions (key 66), v0-v1: the transactions of every coordinator of this
worker (the router fans out to every worker and concatenates), filtered by state names
(unknown names are echoed in `unknown_state_filters`), producer ids and, v1+, a minimum
running time (`duration_filter` ms, -1 = none)."""
from workers.handlers._txn import service


def handle(broker, ctx, req):
    txn, code = service(broker)
    if txn is None:
        return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": [],
                "transaction_states": []}
    return txn.list_transactions(req.get("state_filters"), req.get("producer_id_filters"),
                                 req.get("duration_filter", -1) if ctx.api_version >= 1 else -1)
