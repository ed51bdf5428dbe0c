"""AddPartitionsToTxn (key 24), v0-v4.

v0-v3 (clients): one transaction, `v3_and_below_*` fields; every partition gets the
same coordinator answer, except partitions of unknown topics
(UNKNOWN_TOPIC_OR_PARTITION), which make the others OPERATION_NOT_ATTEMPTED, as Kafka
answers. v4+ (KIP-890, brokers): a batch of transactions, each either added like v0-v3
or, with `verify_only`, only checked (the partition must already be in the producer's
ongoing transaction: NONE, else INVALID_TXN_STATE / the producer error). A fenced epoch
answers PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH before (`_txn.for_version`).
The router sends the request (v4+: each transaction) to the worker coordinating its
transactional id."""
from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode

from workers.handlers._txn import for_version, service


def _partitions(topics) -> list[tuple[str, int]]:
    return [(t["name"], p) for t in topics or () for p in t.get("partitions") or ()]


def _results(tps, codes) -> list[dict]:
    out: dict[str, list] = {}
    for t, p in tps:
        out.setdefault(t, []).append({"partition_index": p, "partition_error_code": codes[(t, p)]})
    return [{"name": t, "results_by_partition": ps} for t, ps in out.items()]


async def _one(broker, version, txn, tid, pid, epoch, topics, verify_only) -> list[dict]:
    tps = list(dict.fromkeys(_partitions(topics)))
    md = broker.metadata
    unknown = {(t, p) for t, p in tps
               if t not in md.topics or p not in md.topics[t].partitions}
    if txn is None:
        codes = {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in tps}
    elif unknown:
        codes = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                 else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in tps}
    elif verify_only:
        codes = txn.verify_partitions(tid, pid, epoch, tps)
    else:
        code = await txn.add_partitions(tid, pid, epoch, tps)
        codes = {tp: code for tp in tps}
    codes = {tp: for_version(api_keys.ADD_PARTITIONS_TO_TXN, version, c)
             for tp, c in codes.items()}
    return _results(tps, codes)


async def handle(broker, ctx, req):
    txn, _ = service(broker)
    if ctx.api_version < 4:
        res = await _one(broker, ctx.api_version, txn, req.get("v3_and_below_transactional_id"),
                         req.get("v3_and_below_producer_id", -1),
                         req.get("v3_and_below_producer_epoch", -1),
                         req.get("v3_and_below_topics"), False)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": res}
    out = []
    for t in req.get("transactions") or ():
        res = await _one(broker, ctx.api_version, txn, t["transactional_id"], t["producer_id"],
                         t["producer_epoch"], t.get("topics"), bool(t.get("verify_only")))
        out.append({"transactional_id": t["transactional_id"], "topic_results": res})
    return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": out}
