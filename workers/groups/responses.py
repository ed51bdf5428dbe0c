"""Response dicts of the group APIs, shaped per version.

Each table lists a response's fields as `name: (first_version, last_version, nested)`
(last_version None: still present in the newest version) in the snake_case naming of
docs/INTERFACES.md. `shape()` keeps exactly the fields that exist in the version being
answered, so a handler fills values once and never thinks about versions;
`tests/workers/groups/test_responses.py` checks these tables against Kafka's JSON schemas.

Values a version cannot carry are adapted here, not in the handlers: JoinGroup v0-6 has a
non-nullable ProtocolName (None is sent as ""), and so on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.groups import errors

NO_AUTHORIZED_OPERATIONS = -2147483648  # INT32_MIN: "not requested"

Spec = dict[str, tuple[int, int | None, "Spec | None"]]


def shape(version: int, spec: Spec, values: dict) -> dict:
    out = {}
    for name, (lo, hi, nested) in spec.items():
        if version < lo or (hi is not None and version > hi):
            continue
        value = values[name]
        if nested is not None:
            value = [shape(version, nested, item) for item in value]
        out[name] = value
    return out


JOIN_GROUP: Spec = {
    "throttle_time_ms": (2, None, None),
    "error_code": (0, None, None),
    "generation_id": (0, None, None),
    "protocol_type": (7, None, None),
    "protocol_name": (0, None, None),
    "leader": (0, None, None),
    "skip_assignment": (9, None, None),
    "member_id": (0, None, None),
    "members": (0, None, {
        "member_id": (0, None, None),
        "group_instance_id": (5, None, None),
        "metadata": (0, None, None),
    }),
}

SYNC_GROUP: Spec = {
    "throttle_time_ms": (1, None, None),
    "error_code": (0, None, None),
    "protocol_type": (5, None, None),
    "protocol_name": (5, None, None),
    "assignment": (0, None, None),
}

HEARTBEAT: Spec = {
    "throttle_time_ms": (1, None, None),
    "error_code": (0, None, None),
}

LEAVE_GROUP: Spec = {
    "throttle_time_ms": (1, None, None),
    "error_code": (0, None, None),
    "members": (3, None, {
        "member_id": (3, None, None),
        "group_instance_id": (3, None, None),
        "error_code": (3, None, None),
    }),
}

_PARTITION_ERRORS: Spec = {"partition_index": (0, None, None), "error_code": (0, None, None)}

OFFSET_COMMIT: Spec = {
    "throttle_time_ms": (3, None, None),
    "topics": (0, None, {"name": (0, None, None), "partitions": (0, None, _PARTITION_ERRORS)}),
}

TXN_OFFSET_COMMIT: Spec = {
    "throttle_time_ms": (0, None, None),
    "topics": (0, None, {"name": (0, None, None), "partitions": (0, None, _PARTITION_ERRORS)}),
}

OFFSET_FETCH: Spec = {
    "throttle_time_ms": (3, None, None),
    "topics": (0, 7, {
        "name": (0, 7, None),
        "partitions": (0, 7, {
            "partition_index": (0, 7, None),
            "committed_offset": (0, 7, None),
            "committed_leader_epoch": (5, 7, None),
            "metadata": (0, 7, None),
            "error_code": (0, 7, None),
        }),
    }),
    "error_code": (2, 7, None),
    "groups": (8, None, {
        "group_id": (8, None, None),
        "topics": (8, None, {
            "name": (8, None, None),
            "partitions": (8, None, {
                "partition_index": (8, None, None),
                "committed_offset": (8, None, None),
                "committed_leader_epoch": (8, None, None),
                "metadata": (8, None, None),
                "error_code": (8, None, None),
            }),
        }),
        "error_code": (8, None, None),
    }),
}

LISTED_GROUP: Spec = {
    "group_id": (0, None, None),
    "protocol_type": (0, None, None),
    "group_state": (4, None, None),
    "group_type": (5, None, None),
}

LIST_GROUPS: Spec = {
    "throttle_time_ms": (1, None, None),
    "error_code": (0, None, None),
    "groups": (0, None, LISTED_GROUP),
}

DESCRIBED_GROUP: Spec = {
    "error_code": (0, None, None),
    "group_id": (0, None, None),
    "group_state": (0, None, None),
    "protocol_type": (0, None, None),
    "protocol_data": (0, None, None),
    "members": (0, None, {
        "member_id": (0, None, None),
        "group_instance_id": (4, None, None),
        "client_id": (0, None, None),
        "client_host": (0, None, None),
        "member_metadata": (0, None, None),
        "member_assignment": (0, None, None),
    }),
    "authorized_operations": (3, None, None),
}

DESCRIBE_GROUPS: Spec = {
    "throttle_time_ms": (1, None, None),
    "groups": (0, None, DESCRIBED_GROUP),
}

DELETABLE_GROUP_RESULT: Spec = {"group_id": (0, None, None), "error_code": (0, None, None)}

DELETE_GROUPS: Spec = {
    "throttle_time_ms": (0, None, None),
    "results": (0, None, DELETABLE_GROUP_RESULT),
}

OFFSET_DELETE: Spec = {
    "error_code": (0, None, None),
    "throttle_time_ms": (0, None, None),
    "topics": (0, None, {"name": (0, None, None), "partitions": (0, None, _PARTITION_ERRORS)}),
}

# API name -> (response spec, newest version the table describes)
SPECS = {
    "JoinGroup": (JOIN_GROUP, 9),
    "SyncGroup": (SYNC_GROUP, 5),
    "Heartbeat": (HEARTBEAT, 4),
    "LeaveGroup": (LEAVE_GROUP, 5),
    "OffsetCommit": (OFFSET_COMMIT, 9),
    "TxnOffsetCommit": (TXN_OFFSET_COMMIT, 4),
    "OffsetFetch": (OFFSET_FETCH, 9),
    "ListGroups": (LIST_GROUPS, 5),
    "DescribeGroups": (DESCRIBE_GROUPS, 5),
    "DeleteGroups": (DELETE_GROUPS, 2),
    "OffsetDelete": (OFFSET_DELETE, 0),
}


# ------------------------------------------------------------------------- results


@dataclass
class JoinResult:
    member_id: str
    error: int = errors.NONE
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: int = errors.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


def join_group(version: int, r: JoinResult) -> dict:
    protocol_name = r.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # non-nullable before v7
    return shape(version, JOIN_GROUP, {
        "throttle_time_ms": 0,
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        "protocol_name": protocol_name,
        "leader": r.leader_id or "",
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [{"member_id": mid, "group_instance_id": iid, "metadata": md}
                    for mid, iid, md in r.members],
    })


def sync_group(version: int, r: SyncResult) -> dict:
    return shape(version, SYNC_GROUP, {
        "throttle_time_ms": 0,
        "error_code": r.error,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    })


def heartbeat(version: int, error: int) -> dict:
    return shape(version, HEARTBEAT, {"throttle_time_ms": 0, "error_code": error})


def leave_group(version: int, top_error: int, members: list[dict]) -> dict:
    if version <= 2 and top_error == errors.NONE:
        # v0-2 have one error: the first member's (Kafka's LeaveGroupResponse.getError)
        top_error = next((m["error_code"] for m in members if m["error_code"]), errors.NONE)
    return shape(version, LEAVE_GROUP, {
        "throttle_time_ms": 0, "error_code": top_error, "members": members})


def topic_partition_errors(entries: list[tuple[str, int, int]]) -> list[dict]:
    """[(topic, partition, error)] -> response topics, in first-seen topic order."""
    topics: dict[str, list[dict]] = {}
    for topic, partition, error in entries:
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def offset_commit(version: int, entries: list[tuple[str, int, int]]) -> dict:
    return shape(version, OFFSET_COMMIT, {
        "throttle_time_ms": 0, "topics": topic_partition_errors(entries)})


def txn_offset_commit(version: int, entries: list[tuple[str, int, int]]) -> dict:
    return shape(version, TXN_OFFSET_COMMIT, {
        "throttle_time_ms": 0, "topics": topic_partition_errors(entries)})


def fetched_topics(entries) -> list[dict]:
    """[(topic, partition, offset, leader_epoch, metadata, error)] -> response topics."""
    topics: dict[str, list[dict]] = {}
    for topic, partition, offset, epoch, metadata, error in entries:
        topics.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": epoch, "metadata": metadata, "error_code": error})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def offset_fetch(version: int, *, error: int = errors.NONE, topics=(), groups=()) -> dict:
    return shape(version, OFFSET_FETCH, {
        "throttle_time_ms": 0, "topics": list(topics), "error_code": error,
        "groups": list(groups)})


def offset_fetch_error(version: int, error: int, topics) -> dict:
    """OffsetFetch v0-v7 answering a group-level error for the requested `topics`
    ([{name, partition_indexes}] or None for all). v0-v1 have no top-level error: every
    requested partition carries it. From v2 Kafka sends the top-level error alone; here
    the requested partitions carry it too (offset -1), because aiokafka reads only the
    partitions' errors and takes an empty answer for "nothing committed": a consumer
    starting while its coordinator loads or moves would otherwise reset its position."""
    entries = [(t["name"], p, -1, -1, "", error)
               for t in topics or () for p in t["partition_indexes"]]
    return offset_fetch(version, error=error, topics=fetched_topics(entries))


def offset_delete(version: int, error: int, entries: list[tuple[str, int, int]]) -> dict:
    return shape(version, OFFSET_DELETE, {
        "error_code": error, "throttle_time_ms": 0,
        "topics": topic_partition_errors(entries)})
