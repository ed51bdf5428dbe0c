"""The generic error response, for every API key and version of the definitions.

Each request is filled with two items in every array (distinct values everywhere), sent
through the codec as a client would, answered with `error_response`, encoded and
decoded again; then: every error field at every level carries the code, every response
array that holds an error field answers the request's items (one element per item,
with the item's identifying values), the message lands in `error_message` fields.
"""
from __future__ import annotations

import itertools

import pytest

from mpbroker.protocol import api_keys as K
from mpbroker.protocol import codec
from mpbroker.protocol.error_response import (ERROR_FIELDS, ID_FIELDS, error_response,
                                              has_error_field, served_apis)
from mpbroker.protocol.schema import INT_TYPES

STORAGE = 56

# Response arrays with an error field that have nothing to answer in the request.
NOTHING_TO_ECHO = {
    (K.METADATA, "topics.partitions"),      # the request names topics, not partitions
    (75, "topics.partitions"),              # DescribeTopicPartitions: the same
    (35, "results"),                        # DescribeLogDirs: log dirs, not topics
    (31, "filter_results.matching_acls"),   # DeleteAcls: what was deleted, nothing on error
    (50, "results"),
    (51, "results"), (57, "results"),       # not served; pairs not defined
}
# Echoed, but identified by something other than an id field (not served; CreateAcls
# and DeleteAcls results: by position).
NO_ID = {(49, "entries"), (30, "results"), (31, "filter_results")}


def _cases():
    for k in served_apis():
        lo, hi = codec.RESPONSES[k].valid_versions
        for v in range(lo, hi + 1):
            if codec.REQUESTS[k].has_version(v):
                yield k, v


class Sample:
    """Request values: 2 items per array, every scalar distinct (int8s modulo 100)."""

    def __init__(self):
        self.n = itertools.count(1)

    def struct(self, fields, v):
        return {f.snake: self.field(f, v) for f in fields if f.versions.has(v)}

    def field(self, f, v):
        if f.is_array:
            if f.is_struct:
                return [self.struct(f.fields, v) for _ in range(2)]
            return [self.scalar(f.elem_type) for _ in range(2)]
        if f.is_struct:
            return self.struct(f.fields, v)
        return self.scalar(f.type)

    def scalar(self, t):
        n = next(self.n)
        if t == "int8":
            return n % 100
        if t in INT_TYPES:
            return 100 + n
        if t == "string":
            return f"s{n}"
        if t == "uuid":
            return n.to_bytes(16, "big")
        if t == "bool":
            return False
        if t == "float64":
            return float(n)
        return b""


def _request(k, v):
    body = Sample().struct(codec.REQUESTS[k].fields, v)
    return codec.decode_request(k, v, memoryview(codec.encode_request(k, v, body)))


def _values(x, out):
    if isinstance(x, dict):
        for val in x.values():
            _values(val, out)
    elif isinstance(x, list):
        for val in x:
            _values(val, out)
    elif isinstance(x, (int, str, bytes)) and not isinstance(x, bool):
        out.add(x)
    return out


def _walk(fields, v, body, path, seen):
    """Yields (path, field, value) of the error fields; collects the echoed arrays."""
    for f in fields:
        if not f.versions.has(v):
            continue
        if f.snake in ERROR_FIELDS:
            yield path + f.snake, f, body.get(f.snake)
        elif f.fields and has_error_field(f, v):
            if f.is_array:
                items = body.get(f.snake) or []
                seen.append((path + f.snake, items, f))
                for it in items:
                    yield from _walk(f.fields, v, it, path + f.snake + ".", seen)
            elif body.get(f.snake) is not None:
                yield from _walk(f.fields, v, body[f.snake], path + f.snake + ".", seen)


@pytest.mark.parametrize("api_key,version", list(_cases()))
def test_every_api_and_version(api_key, version):
    req = _request(api_key, version)
    resp = error_response(api_key, version, req, STORAGE, "disk failed")
    chunks = codec.encode_response(api_key, version, resp)
    back = codec.decode_response(api_key, version, b"".join(bytes(c) for c in chunks))
    seen: list = []
    errors = list(_walk(codec.RESPONSES[api_key].fields, version, back, "", seen))
    for path, _, value in errors:
        assert value == STORAGE, (path, back)
    top_level = [f for f in codec.RESPONSES[api_key].fields
                 if f.versions.has(version) and f.snake in ERROR_FIELDS]
    assert errors or not top_level
    request_values = _values(req, set())
    for path, items, f in seen:
        if (api_key, path) in NOTHING_TO_ECHO:
            continue
        assert items, f"{K.NAMES.get(api_key, api_key)} v{version}: {path} answers nothing"
        for it in items if (api_key, path) not in NO_ID else ():
            ids = {c.snake for c in f.fields if c.versions.has(version)} & ID_FIELDS
            named = [it[s] for s in ids
                     if s in it and it[s] not in ("", None, 0, -1, bytes(16))]
            assert named, (path, it)
            for val in named:
                assert val in request_values, (path, it)
    if any(f.snake == "error_message" and f.versions.has(version)
           for f in codec.RESPONSES[api_key].fields) and "error_message" in back:
        assert back["error_message"] == "disk failed"


def _leaves(resp, *path):
    items = [resp]
    for name in path:
        items = [x for it in items for x in it[name]]
    return items


@pytest.mark.parametrize("api_key,version,path,key,count", [
    (K.PRODUCE, 3, ("responses", "partition_responses"), "index", 4),
    (K.PRODUCE, 11, ("responses", "partition_responses"), "index", 4),
    (K.FETCH, 4, ("responses", "partitions"), "partition_index", 4),
    (K.FETCH, 17, ("responses", "partitions"), "partition_index", 4),
    (K.LIST_OFFSETS, 1, ("topics", "partitions"), "partition_index", 4),
    (K.CREATE_TOPICS, 7, ("topics",), "name", 2),
    (K.DELETE_TOPICS, 4, ("responses",), "name", 2),
    (K.DELETE_TOPICS, 6, ("responses",), "name", 2),
    (K.OFFSET_COMMIT, 8, ("topics", "partitions"), "partition_index", 4),
    (K.OFFSET_FETCH, 9, ("groups", "topics", "partitions"), "partition_index", 8),
    (K.FIND_COORDINATOR, 4, ("coordinators",), "key", 2),
    (K.WRITE_TXN_MARKERS, 1, ("markers", "topics", "partitions"), "partition_index", 8),
    (K.ADD_PARTITIONS_TO_TXN, 4, ("results_by_transaction", "topic_results",
                                  "results_by_partition"), "partition_index", 8),
    (K.STOP_REPLICA, 1, ("partition_errors",), "partition_index", 4),
    (K.LEADER_AND_ISR, 2, ("partition_errors",), "partition_index", 4),
    (K.ELECT_LEADERS, 2, ("replica_election_results", "partition_result"), "partition_id", 4),
    (K.DESCRIBE_GROUPS, 5, ("groups",), "group_id", 2),
])
def test_items_echoed_with_their_identity(api_key, version, path, key, count):
    req = _request(api_key, version)
    resp = error_response(api_key, version, req, STORAGE)
    leaves = _leaves(resp, *path)
    assert len(leaves) == count
    assert len({x[key] for x in leaves}) == count       # each item once, each its own


def test_produce_partition_answer_is_kafkas():
    req = _request(K.PRODUCE, 9)
    resp = error_response(K.PRODUCE, 9, req, -1)
    t0 = req["topic_data"][0]
    r0 = resp["responses"][0]
    assert r0["name"] == t0["name"]
    assert [p["index"] for p in r0["partition_responses"]] == \
        [p["index"] for p in t0["partition_data"]]
    p = r0["partition_responses"][0]
    assert p["error_code"] == -1 and p["base_offset"] == -1 and p["error_message"] is None
    assert resp["throttle_time_ms"] == 0


def test_null_request_array_means_all_and_echoes_nothing():
    resp = error_response(K.METADATA, 12, {"topics": None}, STORAGE)
    assert resp.get("topics") == []
    assert resp["throttle_time_ms"] == 0


def test_fetch_partition_field_maps_to_partition_index():
    req = {"topics": [{"topic": "t", "partitions": [{"partition": 3}, {"partition": 5}]}]}
    resp = error_response(K.FETCH, 11, req, STORAGE)
    (t,) = resp["responses"]
    assert t["topic"] == "t"
    assert [(p["partition_index"], p["error_code"], p["high_watermark"]) for p in t["partitions"]] \
        == [(3, STORAGE, -1), (5, STORAGE, -1)]
    assert resp["error_code"] == STORAGE


def test_scram_users_apis_echo_each_user_once():
    resp = error_response(51, 0, {"deletions": [{"name": "a", "mechanism": 1}],
                                  "upsertions": [{"name": "a", "mechanism": 2},
                                                 {"name": "b", "mechanism": 1}]}, 31, "no")
    assert resp["results"] == [{"user": "a", "error_code": 31, "error_message": "no"},
                               {"user": "b", "error_code": 31, "error_message": "no"}]
    resp = error_response(50, 0, {"users": [{"name": "a"}]}, 31, "no")
    assert resp["error_code"] == 31 and [r["user"] for r in resp["results"]] == ["a"]
    assert error_response(50, 0, {"users": None}, 31, "no")["results"] == []
