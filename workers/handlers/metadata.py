"""Metadata (key 3), v0-v12.

Topics: v0 an empty list means all topics, v1+ null means all. With
`auto.create.topics.enable` and `allow_auto_topic_creation` (always true before v4),
unknown topics are created through the controller with `num.partitions` and
`default.replication.factor`, and answered LEADER_NOT_AVAILABLE while that happens, as
Kafka does; internal topics are never auto-created this way. Unlike Kafka (which answers
LEADER_NOT_AVAILABLE and lets the client ask again), the answer waits for the
controller and carries the created topic, which saves clients a retry round. v10+ may name topics by id
(name null); an unknown id gets UNKNOWN_TOPIC_ID.
"""
from mpbroker.protocol.errors import ErrorCode
from mpbroker.metadata.model import validate_topic_name

ZERO_UUID = bytes(16)


def topic_entry(broker, topic, version) -> dict:
    partitions = []
    for index in sorted(topic.partitions):
        st = topic.partitions[index]
        live = broker.metadata.brokers
        error = ErrorCode.NONE if st.leader in live else ErrorCode.LEADER_NOT_AVAILABLE
        partitions.append({
            "error_code": error, "partition_index": index, "leader_id": st.leader,
            "leader_epoch": st.leader_epoch, "replica_nodes": list(st.replicas),
            "isr_nodes": list(st.isr), "offline_replicas": list(st.offline_replicas)})
    return {"error_code": ErrorCode.NONE, "name": topic.name, "topic_id": topic.topic_id,
            "is_internal": topic.is_internal, "partitions": partitions,
            "topic_authorized_operations": -2147483648}


def _error_entry(name, error, topic_id=ZERO_UUID) -> dict:
    return {"error_code": error, "name": name, "topic_id": topic_id, "is_internal": False,
            "partitions": [], "topic_authorized_operations": -2147483648}


def handle(broker, ctx, req):
    to_create = _auto_create_names(broker, ctx, req)
    if not to_create:
        return _response(broker, ctx, req)

    async def later():
        await broker.controller.auto_create_topics(to_create)
        return _response(broker, ctx, req)
    return later()


def _auto_create_names(broker, ctx, req) -> list[str]:
    requested = req["topics"]
    if requested is None or (ctx.api_version == 0 and not requested):
        return []
    if not (req.get("allow_auto_topic_creation", True)
            and broker.config.get("auto.create.topics.enable", True)):
        return []
    out = []
    for rt in requested:
        name = rt.get("name")
        if name is None or name in broker.metadata.topics or name.startswith("__"):
            continue
        try:
            validate_topic_name(name)
        except Exception:
            continue
        out.append(name)
    return out


def _response(broker, ctx, req):
    version = ctx.api_version
    md = broker.metadata
    requested = req["topics"]
    if requested is None or (version == 0 and not requested):
        topics = [topic_entry(broker, t, version) for t in md.topics.values()]
    else:
        topics = []
        for rt in requested:
            name = rt.get("name")
            if name is None:
                tid = rt.get("topic_id", ZERO_UUID)
                name = broker.topic_name_for_id(tid)
                if name is None:
                    topics.append(_error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, tid))
                    continue
            t = md.topics.get(name)
            if t is not None:
                topics.append(topic_entry(broker, t, version))
                continue
            try:
                validate_topic_name(name)
                valid = True
            except Exception:
                valid = False
            if not valid:
                topics.append(_error_entry(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
            else:
                topics.append(_error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    brokers = [{"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
               for b in md.brokers.values()]
    return {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": md.cluster_id,
            "controller_id": md.controller_id, "topics": topics,
            "cluster_authorized_operations": -2147483648}
