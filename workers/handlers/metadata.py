"""Metadata (key 3), v0-v13.

Topics: v0 an empty list means all topics, v1+ null means all. v10+ may name topics by
id (name null); an unknown id gets UNKNOWN_TOPIC_ID. v13 adds a top-level error code
(always 0 here: it only carries REBOOTSTRAP_REQUIRED, KIP-1102).

Auto-creation, as Kafka's ZooKeeper-mode broker (AutoTopicCreationManager with a
CreateTopics of timeout 0): with `auto.create.topics.enable` and
`allow_auto_topic_creation` (always true before v4), each requested topic that does
not exist is created through the controller with `num.partitions` and
`default.replication.factor`; the internal topics are not (their coordinators create
them). A name Kafka would refuse answers INVALID_TOPIC_EXCEPTION without asking the
controller; a creation the controller refuses answers the controller's error (e.g.
INVALID_REPLICATION_FACTOR with too few brokers); a topic that was created (or
already exists there) but has not reached this worker's metadata yet answers
LEADER_NOT_AVAILABLE, so the client asks again. The controller does not wait for
leaders. Kafka always answers LEADER_NOT_AVAILABLE for a topic it just created (its
metadata cache learns of it later); here, when the new metadata already reached this
worker (the embedded controller pushes it to the asking worker before it answers),
the topic is answered in full instead, which saves the client a round trip. Without
auto-creation an unknown topic is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
for a bad name).

Auto-creation is bounded per request: the new topics are asked for in request order
while their partitions (`num.partitions` each) stay within what one CreateTopics may
create (`MAX_PARTITIONS_PER_REQUEST`, 9,999, KRaft's bound); the others answer
UNKNOWN_TOPIC_OR_PARTITION this time (a later Metadata request creates them). The
controller applies `max.broker.partitions` / `max.partitions` (POLICY_VIOLATION is then
the topic's error) and counts the creations in the client's KIP-599 quota permissively,
as Kafka's AutoTopicCreationManager does.
"""
from mpbroker.protocol.errors import ErrorCode
from mpbroker.metadata.model import INTERNAL_TOPICS, MAX_PARTITIONS_PER_REQUEST, validate_topic_name

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
        return _response(broker, ctx, req, {})

    async def later():
        specs = [{"name": n, "num_partitions": -1, "replication_factor": -1,
                  "assignments": {}, "configs": []} for n in to_create]
        results = await broker.controller.create_topics(specs, False, 0, (ctx.client_id or "", False))
        errors = {}
        for r in results:
            code = r["error_code"]
            errors[r["name"]] = ErrorCode.LEADER_NOT_AVAILABLE \
                if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS) else code
        return _response(broker, ctx, req, errors)
    return later()


def _auto_create_names(broker, ctx, req) -> list[str]:
    requested = req["topics"]
    if requested is None or (ctx.api_version == 0 and not requested):
        return []
    if not (req.get("allow_auto_topic_creation", True)
            and broker.config["auto.create.topics.enable"]):
        return []
    per_topic = max(1, int(broker.config["num.partitions"]))
    budget = MAX_PARTITIONS_PER_REQUEST // per_topic
    out, seen = [], set()
    for rt in requested:
        if len(out) >= budget:
            break
        name = rt.get("name")
        if name is None or name in broker.metadata.topics or name in INTERNAL_TOPICS \
                or name in seen or not _valid_name(name):
            continue
        seen.add(name)
        out.append(name)
    return out


def _valid_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except Exception:
        return False
    return True


def _response(broker, ctx, req, create_errors: dict):
    """The answer from this worker's metadata; `create_errors` is what auto-creation
    answered for topics that are not (yet) in it."""
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
            elif not _valid_name(name):
                topics.append(_error_entry(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
            else:
                topics.append(_error_entry(name, create_errors.get(
                    name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
    listener = getattr(ctx, "listener_name", None)
    brokers = [{"node_id": b.id, "host": a[0], "port": a[1], "rack": b.rack}
               for b in md.brokers.values() for a in [b.address(listener)] if a is not None]
    return {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": md.cluster_id,
            "controller_id": md.controller_id, "topics": topics,
            "cluster_authorized_operations": -2147483648, "error_code": ErrorCode.NONE}
