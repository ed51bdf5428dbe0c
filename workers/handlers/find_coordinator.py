"""FindCoordinator (key 10), v0-v6. Key type 0 is a consumer group, 1 a transactional id.

The group coordinator is the leader of `__consumer_offsets` partition
abs(javaStringHashCode(group)) % partitions; the transaction coordinator of a
transactional id the leader of `__transaction_state` partition
abs(javaStringHashCode(id)) % transaction.state.log.num.partitions (workers/txn/). Each
topic is created on first use, as Kafka does. v4+ batches keys (KIP-699)."""
from mpbroker.metadata.model import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from mpbroker.protocol.errors import ErrorCode


def locate(broker, key: str, key_type: int, listener_name: str | None = None) -> dict:
    out = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": 0,
           "error_message": None}
    if key_type == 0:
        topic_name = OFFSETS_TOPIC
        if broker.groups is None:
            out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return out
    elif key_type == 1:
        txn = getattr(broker, "transactions", None)
        if txn is None:
            out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            out["error_message"] = "The transaction coordinator is not running"
            return out
        topic_name = TRANSACTION_STATE_TOPIC
        if not key:
            out["error_code"] = ErrorCode.INVALID_REQUEST
            out["error_message"] = "Transactional id must be a non-empty string"
            return out
    else:
        out["error_code"] = ErrorCode.INVALID_REQUEST
        out["error_message"] = f"Unknown coordinator key type {key_type}"
        return out
    topic = broker.metadata.topics.get(topic_name)
    if topic is None:
        out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return out
    if key_type == 0:
        idx = broker.groups.partition_for(key)
    else:
        idx = broker.transactions.partition_for(key)
    state = topic.partitions.get(idx)
    if state is None:           # not initialized yet (a topic being created)
        out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return out
    node = broker.metadata.brokers.get(state.leader)
    if node is None:
        out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return out
    address = node.address(listener_name)
    if address is None:         # the coordinator has no listener of this name
        out["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return out
    out.update(node_id=node.id, host=address[0], port=address[1])
    return out


def handle(broker, ctx, req):
    """The internal topic is created first when missing (through the controller)."""
    if req.get("key_type", 0) in (0, 1):
        name = OFFSETS_TOPIC if req.get("key_type", 0) == 0 else TRANSACTION_STATE_TOPIC
        usable = req.get("key_type", 0) == 0 and broker.groups is not None or \
            getattr(broker, "transactions", None) is not None
        if usable and name not in broker.metadata.topics:
            async def later():
                await broker.controller.ensure_internal_topic(name)
                return _answer(broker, ctx, req)
            return later()
    return _answer(broker, ctx, req)


def _answer(broker, ctx, req):
    listener = getattr(ctx, "listener_name", None)
    if ctx.api_version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [
            locate(broker, k, req.get("key_type", 0), listener) for k in req["coordinator_keys"]]}
    c = locate(broker, req["key"], req.get("key_type", 0), listener)
    return {"throttle_time_ms": 0, "error_code": c["error_code"],
            "error_message": c["error_message"], "node_id": c["node_id"], "host": c["host"],
            "port": c["port"]}
