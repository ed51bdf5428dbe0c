"""The error response of any API, built from the message definitions (no I/O).

`error_response(api_key, version, request, error_code, message=None)` is what Kafka's
`AbstractRequest.getErrorResponse` answers, for every API of `definitions.txt` at once
instead of one hand-written method per API:

* every error field of the response (`error_code`, `partition_error_code`) at every
  level (top level, per topic, per partition, per group, per resource...) carries
  `error_code`; `error_message` fields carry `message` (Kafka leaves it null for
  UNKNOWN_SERVER_ERROR so as not to leak internals: callers pass None then);
* the request's items are echoed: a response array whose elements hold an error field
  gets one element per item of the matching request array (same name, or a known pair
  such as Produce's `topic_data` -> `responses`, `partition_indexes` -> `partitions`,
  or a flattened path such as LeaderAndIsr's `topic_states/partition_states` ->
  `partition_errors`), with the identifying fields (`name`, `topic_id`,
  `partition_index`, `group_id`, `key`, ...) copied from the item (`ALIASES` maps
  response names to request names: Fetch's `partition` is the response's
  `partition_index`); an item that is a bare value (`[]int32`, `[]string`) fills the
  element's first identifying field not found otherwise;
* arrays without an error field (brokers, records' `record_errors`, members of a
  JoinGroup) stay empty, offsets, epochs and ids that have no schema default are -1
  (Kafka's "unknown"), everything else takes its schema default (codec.default_value).

A request array that is null (Metadata's "all topics") is echoed as an empty array.
"""
from __future__ import annotations

from .codec import REQUESTS, RESPONSES
from .schema import NO_DEFAULT, Field, INT_TYPES

ERROR_FIELDS = frozenset({"error_code", "partition_error_code"})

# Fields that name what an element of a response array is about.
ID_FIELDS = frozenset({
    "name", "topic", "topic_name", "topic_id", "partition_index", "partition", "index",
    "partition_id", "group_id", "key", "transactional_id", "member_id",
    "group_instance_id", "resource_type", "resource_name", "producer_id", "user"})

# response field -> request fields that carry its value, in order of preference
ALIASES = {
    "name": ("name", "topic", "topic_name"),
    "topic": ("topic", "name", "topic_name"),
    "topic_name": ("topic_name", "name", "topic"),
    "partition_index": ("partition_index", "partition", "index", "partition_id"),
    "partition": ("partition", "partition_index", "index"),
    "index": ("index", "partition_index", "partition"),
    "partition_id": ("partition_id", "partition_index", "partition"),
    "user": ("user", "name"),           # the SCRAM users APIs (50, 51)
}

# response array -> request arrays it answers (after the same name), "a/b" = flattened,
# "a+b" = both arrays, one element per distinct name (AlterUserScramCredentials' users)
PAIRS = {
    "responses": ("topic_data", "topics", "topic_names", "resources"),
    "partition_responses": ("partition_data",),
    "partitions": ("partition_indexes", "partition_data", "partition_states"),
    "results": ("resources", "topics", "groups_names", "dirs/topics",    # dirs: AlterReplicaLogDirs
                "users", "deletions+upsertions",                      # the SCRAM users APIs
                "creations"),                                         # CreateAcls
    "filter_results": ("filters",),                                   # DeleteAcls
    "groups": ("group_ids",),
    "coordinators": ("coordinator_keys",),
    "transaction_states": ("transactional_ids",),
    "results_by_transaction": ("transactions",),
    "topic_results": ("topics",),
    "results_by_partition": ("partitions",),
    "results_by_topic_v3_and_below": ("v3_and_below_topics",),
    "replica_election_results": ("topic_partitions",),
    "partition_result": ("partitions",),
    "topics": ("topic_states",),
    "partition_errors": ("partition_states", "ungrouped_partition_states",
                         "ungrouped_partitions", "topic_states/partition_states",
                         "topics/partition_indexes"),
}

# Response arrays that are not answers to request items, although both have a name
# that pairs them: DescribeLogDirs' `results` are log dirs, not the requested topics
# (Kafka answers the top-level error only).
NOT_ECHOED = {35: frozenset({"results"})}

# Integer fields meaning "unknown" at -1 when the schema gives no default.
MINUS_ONE = frozenset({
    "base_offset", "offset", "timestamp", "high_watermark", "last_stable_offset",
    "log_start_offset", "leader_id", "leader_epoch", "node_id", "port", "producer_id",
    "producer_epoch", "end_offset", "committed_offset", "committed_leader_epoch",
    "generation_id", "low_watermark", "controller_id", "num_partitions",
    "replication_factor"})

_VALUE = "\0value"      # the key of a bare array item (an int or a string)


def error_response(api_key: int, version: int, request: dict | None, error_code: int,
                   message: str | None = None) -> dict:
    """The response dict of `api_key` v`version` answering every part of `request`
    with `error_code`."""
    msg = RESPONSES[api_key]
    skip = NOT_ECHOED.get(api_key, frozenset())
    return _struct(msg.fields, version, [request or {}], error_code, message, skip, top=True)


def has_error_field(f: Field, version: int) -> bool:
    """Whether the struct (or array of structs) `f` holds an error field in `version`."""
    for c in f.fields or ():
        if not c.versions.has(version):
            continue
        if c.snake in ERROR_FIELDS or (c.fields and has_error_field(c, version)):
            return True
    return False


def _struct(fields, version, chain, code, message, skip, top=False) -> dict:
    out: dict = {}
    item = chain[-1]
    bare = None if top else item.get(_VALUE)
    for f in fields:
        if not f.versions.has(version):
            continue
        s = f.snake
        if s in ERROR_FIELDS:
            out[s] = code
        elif s == "error_message":
            out[s] = message if message is not None or f.nullable_versions.has(version) else ""
        elif s == "throttle_time_ms":
            out[s] = 0
        elif f.is_array:
            if f.is_struct and has_error_field(f, version):
                items = () if s in skip else _request_items(s, item)
                out[s] = [_struct(f.fields, version, chain + [it], code, message, skip)
                          for it in items]
        elif f.is_struct:
            if has_error_field(f, version):
                out[s] = _struct(f.fields, version, chain, code, message, skip)
        elif not top and s in ID_FIELDS and _lookup(s, chain) is not _MISSING:
            out[s] = _lookup(s, chain)
        elif not top and bare is not None and s in ID_FIELDS:
            out[s] = bare
            bare = None
        elif s in MINUS_ONE and f.type in INT_TYPES and f.default is NO_DEFAULT:
            out[s] = -1
    return out


_MISSING = object()


def _lookup(name: str, chain: list) -> object:
    """The value of response field `name` from the request item (or its parents)."""
    for item in reversed(chain[1:]):
        for cand in ALIASES.get(name, (name,)):
            if cand in item and item[cand] is not None and not isinstance(item[cand], (list, dict)):
                return item[cand]
    return _MISSING


def _request_items(resp_name: str, item: dict) -> list[dict]:
    """The request items a response array answers (see PAIRS), each a dict; bare values
    become {_VALUE: v}; flattened items carry their parent's identifying fields."""
    for cand in (resp_name,) + PAIRS.get(resp_name, ()):
        if "+" in cand:
            arrays = cand.split("+")
            if not all(a in item for a in arrays):
                continue
            seen: dict = {}
            for a in arrays:
                for x in item[a] or ():
                    seen.setdefault(_as_item(x).get("name"), _as_item(x))
            return list(seen.values())
        head, _, rest = cand.partition("/")
        if head not in item:
            continue
        items = item[head]
        if not isinstance(items, list):
            return []           # null: "all" (Metadata topics, OffsetFetch topics)
        if not rest:
            return [_as_item(x) for x in items]
        out = []
        for parent in items:
            ids = {k: v for k, v in parent.items() if k in ID_FIELDS}
            for child in parent.get(rest) or ():
                out.append({**ids, **_as_item(child)})
        return out
    return []


def _as_item(x) -> dict:
    return x if isinstance(x, dict) else {_VALUE: x}


def served_apis() -> list[int]:
    """Every API key with both a request and a response definition."""
    return sorted(k for k in REQUESTS if k in RESPONSES)
