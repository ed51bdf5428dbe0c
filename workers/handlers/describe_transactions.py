"""DescribeTransactions (key 65), v0: the state of each transactional id this worker
coordinates (the router splits the ids by coordinator worker and merges the answers in
request order); ids of other coordinators answer NOT_COORDINATOR, unknown ids
TRANSACTIONAL_ID_NOT_FOUND."""

from workers.handlers._txn import service


def handle(broker, ctx, req):
    txn, code = service(broker)
    states = []
    for tid in req.get("transactional_ids") or ():
        if txn is None:
            states.append({"error_code": code, "transactional_id": tid, "transaction_state": "",
                           "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
        else:
            states.append(txn.describe(tid))
    return {"throttle_time_ms": 0, "transaction_states": states}
