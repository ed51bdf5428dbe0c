"""TxnOffsetCommit (key 28), v0-v4: offsets committed inside a transaction.

Routed to the group's coordinator (like OffsetCommit). Partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION. Before the group coordinator stores the offsets as pending
transactional offsets (a transactional batch on `__consumer_offsets`, visible to
OffsetFetch only after the COMMIT marker lands on that partition, dropped on ABORT),
the transaction coordinator is asked (KIP-890 part 1, `broker.txn_verifier`, unless
`transaction.partition.verification.enable` is false) whether
AddOffsetsToTxn put that partition in the producer's ongoing transaction at this epoch:
otherwise INVALID_TXN_STATE, or INVALID_PRODUCER_EPOCH for a fenced epoch (never
PRODUCER_FENCED, at any version, as in Kafka), for every partition, and retriable
coordinator states COORDINATOR_LOAD_IN_PROGRESS."""
from mpbroker.metadata.model import OFFSETS_TOPIC
from mpbroker.protocol.errors import ErrorCode
from workers.answers import settle
from workers.handlers._groups import call_for_known_partitions, coordinator


def _all(topics, code_of) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": code_of(t["name"], p["partition_index"])}
            for p in t["partitions"]]} for t in topics]}


async def handle(broker, ctx, req):
    topics = req.get("topics") or []
    if not req.get("transactional_id") or req.get("producer_id", -1) < 0:
        return _all(topics, lambda *_: ErrorCode.INVALID_REQUEST)
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return _all(topics, lambda *_: err)
    verifier = getattr(broker, "txn_verifier", None)
    if verifier is not None and broker.config["transaction.partition.verification.enable"]:
        code = verifier(req["transactional_id"], req["producer_id"], req["producer_epoch"],
                        OFFSETS_TOPIC, broker.groups.partition_for(req["group_id"]))
        code = await settle(code)
        if code == ErrorCode.NOT_ENOUGH_REPLICAS:
            code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if code:
            return _all(topics, lambda *_: code)
        coord, err = coordinator(broker, req["group_id"])
        if coord is None:
            return _all(topics, lambda *_: err)
    return await settle(call_for_known_partitions(broker, coord.txn_offset_commit, req,
                                                  ctx.api_version))
