"""Codec tests: bytes built field by field, round trips, and other clients' codecs."""
import random
import struct
import uuid

import pytest

from mpbroker.protocol import api_keys, codec
from mpbroker.protocol.errors import EncodeError, ProtocolError, UnsupportedVersion
from storage.slices import FileSlice

from .gen_values import fill, plain


def h(v): return struct.pack(">h", v)
def i(v): return struct.pack(">i", v)
def q(v): return struct.pack(">q", v)
def s(text): return h(len(text)) + text.encode()              # classic string
def cs(text): return bytes([len(text) + 1]) + text.encode()   # compact string (short)
def uv(n): return bytes([n])                                  # uvarint < 128


def enc_resp(key, version, body):
    return b"".join(codec.encode_response(key, version, body))


# ---------------------------------------------------------------- ApiVersions

def test_api_versions_v0_response_bytes():
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 11},
                                          {"api_key": 18, "min_version": 0, "max_version": 4}]}
    expected = (
        h(0)                       # error_code
        + i(2)                     # api_keys: int32 count
        + h(0) + h(0) + h(11)      #   api_key 0 (Produce), min 0, max 11
        + h(18) + h(0) + h(4)      #   api_key 18 (ApiVersions), min 0, max 4
    )                              # (no throttle_time_ms before v1)
    assert enc_resp(18, 0, body) == expected
    assert codec.decode_response(18, 0, expected) == body


def test_api_versions_v3_response_bytes():
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
            "throttle_time_ms": 7, "finalized_features_epoch": 5}
    expected = (
        h(0)                       # error_code
        + uv(2)                    # api_keys: compact count 1+1
        + h(18) + h(0) + h(4)      #   api_key, min_version, max_version
        + uv(0)                    #   element tagged fields: none
        + i(7)                     # throttle_time_ms
        + uv(1)                    # tagged fields: 1 entry
        + uv(1) + uv(8) + q(5)     #   tag 1 FinalizedFeaturesEpoch, size 8, int64 5
    )
    assert enc_resp(18, 3, body) == expected
    back = codec.decode_response(18, 3, expected)
    assert back["finalized_features_epoch"] == 5
    assert back["supported_features"] == [] and back["zk_migration_ready"] is False
    assert back["api_keys"] == body["api_keys"]


# ---------------------------------------------------------------- Metadata

def test_metadata_v1_request_bytes():
    assert codec.encode_request(3, 1, {"topics": None}) == i(-1)    # null: all topics
    expected = (
        i(2)                       # topics: int32 count
        + s("a") + s("bc")         #   name (classic string) each
    )
    body = {"topics": [{"name": "a"}, {"name": "bc"}]}
    assert codec.encode_request(3, 1, body) == expected
    assert codec.decode_request(3, 1, memoryview(expected), 0) == body


def test_metadata_v12_request_bytes():
    tid = bytes(range(16))
    body = {"topics": [{"topic_id": tid, "name": "t1"}, {"topic_id": bytes(16), "name": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": True}
    expected = (
        uv(3)                      # topics: compact count 2+1
        + tid + cs("t1") + uv(0)   #   topic_id uuid, name compact string, tagged fields
        + bytes(16) + uv(0) + uv(0)  # zero uuid, name null (0), tagged fields
        + b"\x00"                  # allow_auto_topic_creation false
        + b"\x01"                  # include_topic_authorized_operations true
        + uv(0)                    # tagged fields
    )
    assert codec.encode_request(3, 12, body) == expected
    assert codec.decode_request(3, 12, expected) == body


# ---------------------------------------------------------------- Produce

def test_produce_v3_request_bytes():
    records = b"R" * 70
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": records}]}]}
    expected = (
        h(-1)                      # transactional_id: null
        + h(-1)                    # acks
        + i(30000)                 # timeout_ms
        + i(1)                     # topic_data count
        + s("t")                   #   name
        + i(1)                     #   partition_data count
        + i(2)                     #     index
        + i(70) + records          #     records: int32 length + bytes
    )
    assert codec.encode_request(0, 3, body) == expected
    back = codec.decode_request(0, 3, expected)
    rec = back["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(rec, memoryview) and rec.obj is not None and bytes(rec) == records
    assert plain(back) == body


def test_produce_v9_request_bytes():
    records = b"B" * 200               # length 200+1 needs a two-byte uvarint
    body = {"transactional_id": "tx", "acks": 1, "timeout_ms": 1500,
            "topic_data": [{"name": "topic", "partition_data": [{"index": 0, "records": records}]}]}
    expected = (
        cs("tx")                   # transactional_id: compact nullable string
        + h(1)                     # acks
        + i(1500)                  # timeout_ms
        + uv(2)                    # topic_data: compact count
        + cs("topic")              #   name
        + uv(2)                    #   partition_data: compact count
        + i(0)                     #     index
        + b"\xc9\x01" + records    #     records: uvarint 201 (0xc9 0x01) + bytes
        + uv(0)                    #     partition tagged fields
        + uv(0)                    #   topic tagged fields
        + uv(0)                    # request tagged fields
    )
    assert codec.encode_request(0, 9, body) == expected
    assert plain(codec.decode_request(0, 9, expected)) == body


# ---------------------------------------------------------------- Fetch

def test_fetch_v4_response_bytes():
    body = {"throttle_time_ms": 0, "responses": [{"topic": "t", "partitions": [{
        "partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 9,
        "aborted_transactions": [{"producer_id": 7, "first_offset": 3}], "records": b"xyz"}]}]}
    expected = (
        i(0)                       # throttle_time_ms
        + i(1) + s("t")            # responses count, topic
        + i(1)                     # partitions count
        + i(0) + h(0)              #   partition_index, error_code
        + q(10) + q(9)             #   high_watermark, last_stable_offset
        + i(1) + q(7) + q(3)       #   aborted_transactions: count, producer_id, first_offset
        + i(3) + b"xyz"            #   records
    )
    assert enc_resp(1, 4, body) == expected
    assert plain(codec.decode_response(1, 4, expected)) == body


def test_fetch_v12_response_bytes_and_file_slices():
    fs = FileSlice("/data/t-0/00000000000000000000.log", 4096, 1000)
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{
        "topic": "t", "partitions": [{
            "partition_index": 1, "error_code": 0, "high_watermark": 100,
            "last_stable_offset": 100, "log_start_offset": 0, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": [b"ab", fs],
            "current_leader": {"leader_id": 1, "leader_epoch": 4}}]}]}
    chunks = codec.encode_response(1, 12, body)
    assert chunks[1] is fs                        # passed through, not read
    head, tail = bytes(chunks[0]), b"".join(chunks[2:])
    expected_head = (
        i(0) + h(0) + i(0)         # throttle_time_ms, error_code, session_id
        + uv(2) + cs("t")          # responses: compact count, topic
        + uv(2)                    # partitions: compact count
        + i(1) + h(0)              #   partition_index, error_code
        + q(100) + q(100) + q(0)   #   high_watermark, last_stable_offset, log_start_offset
        + uv(0)                    #   aborted_transactions: null
        + i(-1)                    #   preferred_read_replica
        + b"\xeb\x07" + b"ab"      #   records: uvarint 1002+1 = 1003, first chunk copied
    )
    expected_tail = (
        uv(1)                      #   partition tagged fields: 1 entry
        + uv(1) + uv(9)            #     tag 1 CurrentLeader, size 9
        + i(1) + i(4) + uv(0)      #     leader_id, leader_epoch, struct tagged fields
        + uv(0)                    #   topic tagged fields
        + uv(0)                    # response tagged fields
    )
    assert head == expected_head and tail == expected_tail
    # the same with the slice's bytes inline decodes back
    wire = head + b"F" * 1000 + tail
    back = codec.decode_response(1, 12, wire)
    p = back["responses"][0]["partitions"][0]
    assert bytes(p["records"]) == b"ab" + b"F" * 1000
    assert p["current_leader"] == {"leader_id": 1, "leader_epoch": 4}
    assert p["diverging_epoch"] == {"epoch": -1, "end_offset": -1}   # absent tag: default


def test_large_records_are_passed_through():
    big = b"z" * 4096
    chunks = codec.encode_response(0, 9, {"responses": []})
    assert len(chunks) == 1
    chunks = codec.encode_request(0, 9, {"topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": big}]}]})
    assert big in chunks


def test_no_records_as_an_empty_list_empty_bytes_or_null():
    """An empty list (a caught-up Fetch partition) is written inline: the same bytes
    as empty bytes; None is null."""
    def records_bytes(version, records):
        body = {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "records": records}]}]}
        return enc_resp(1, version, body)
    for version, empty, null in ((16, uv(1), uv(0)), (11, i(0), i(-1)), (3, i(0), i(-1))):
        tail = b"\x00" * 3 if version == 16 else b""      # v16: the tagged fields after it
        assert records_bytes(version, []) == records_bytes(version, b"")
        assert records_bytes(version, []).endswith(empty + tail)
        assert records_bytes(version, None).endswith(null + tail)
    data = codec.encode_request(0, 9, {"topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": []}]}]})
    assert bytes(codec.decode_request(0, 9, data)["topic_data"][0]["partition_data"][0][
        "records"]) == b""


# ---------------------------------------------------------------- defaults, errors

def test_missing_keys_mean_defaults():
    data = codec.encode_request(1, 12, {"topics": []})
    back = codec.decode_request(1, 12, data)
    assert back["max_bytes"] == 0x7FFFFFFF and back["replica_id"] == -1
    assert back["session_epoch"] == -1 and back["cluster_id"] is None
    assert back["rack_id"] == ""
    assert "replica_state" not in back                      # v15+ only


def test_a_field_missing_from_a_run_encodes_as_its_default():
    # the encoder reads every field of a fixed-size run by subscript and falls back to
    # the defaults when one is missing: the bytes are those of the full body
    full = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic_id": b"\x01" * 16, "partitions": [
            {"partition_index": 3, "error_code": 0, "high_watermark": 0,
             "last_stable_offset": -1, "log_start_offset": -1,
             "aborted_transactions": None, "preferred_read_replica": -1,
             "records": []}]}]}
    part = {k: v for k, v in full["responses"][0]["partitions"][0].items()
            if k not in ("high_watermark", "aborted_transactions", "preferred_read_replica")}
    sparse = {"session_id": 0, "responses": [{"topic_id": b"\x01" * 16,
                                              "partitions": [part]}]}
    assert b"".join(codec.encode_response(1, 16, sparse)) == \
        b"".join(codec.encode_response(1, 16, full))
    # a tagged field absent, or equal to its default, is not written; another is
    tagged = {**part, "diverging_epoch": {"epoch": -1, "end_offset": -1}}
    assert b"".join(codec.encode_response(1, 16, {"responses": [
        {"topic_id": b"\x01" * 16, "partitions": [tagged]}]})) == \
        b"".join(codec.encode_response(1, 16, full))
    tagged["diverging_epoch"] = {"epoch": 4, "end_offset": 9}
    back = codec.decode_response(1, 16, b"".join(codec.encode_response(1, 16, {"responses": [
        {"topic_id": b"\x01" * 16, "partitions": [tagged]}]})))
    assert back["responses"][0]["partitions"][0]["diverging_epoch"] == \
        {"epoch": 4, "end_offset": 9}


def test_unsupported_versions():
    with pytest.raises(UnsupportedVersion):
        codec.decode_request(0, 12, b"")
    with pytest.raises(UnsupportedVersion):
        codec.encode_response(9999, 0, {})
    with pytest.raises(UnsupportedVersion):
        codec.decode_request(52, 0, b"")                        # controller-only (Vote)
    assert issubclass(UnsupportedVersion, ProtocolError)


def test_malformed_input_is_protocol_error():
    good = codec.encode_request(0, 9, {"topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"abc"}]}]})
    for cut in range(len(good)):
        with pytest.raises(ProtocolError):
            codec.decode_request(0, 9, good[:cut])
    with pytest.raises(ProtocolError):                          # count far above the bytes left
        codec.decode_request(3, 1, i(2**31 - 1))


def test_encode_errors():
    with pytest.raises(EncodeError):
        codec.encode_request(0, 3, {"acks": 1 << 20})
    with pytest.raises(EncodeError):
        codec.encode_request(3, 1, {"topics": [{"name": 5}]})
    with pytest.raises(EncodeError):
        codec.encode_request(0, 3, {"topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": [FileSlice("/x", 0, 1)]}]}]})


def test_tables():
    assert codec.REQUESTS[api_keys.PRODUCE].valid_versions == (0, 11)
    assert codec.REQUESTS[api_keys.PRODUCE].flexible_from == 9
    assert codec.RESPONSES[api_keys.SASL_HANDSHAKE].flexible_from is None
    assert api_keys.NAMES[0] == "Produce" and api_keys.NAMES[18] == "ApiVersions"
    assert len(codec.REQUESTS) == len(codec.RESPONSES) == 79


def test_consumer_protocol_data():
    sub = {"topics": ["a", "b"], "user_data": None, "owned_partitions": [
        {"topic": "a", "partitions": [0, 1]}], "generation_id": 3, "rack_id": "r1"}
    data = codec.encode_data("ConsumerProtocolSubscription", 3, sub)
    assert codec.decode_data("ConsumerProtocolSubscription", 3, data) == sub


# ---------------------------------------------------------------- round trips

ALL_VERSIONS = [(m.name, v) for m in codec.MESSAGES.values()
                for v in range(m.valid_versions[0], m.valid_versions[1] + 1)]


@pytest.mark.parametrize("name,version", ALL_VERSIONS)
def test_round_trip_every_version(name, version):
    msg = codec.MESSAGES[name]
    for seed in range(3):
        body = fill(msg, version, random.Random(f"{name}/{version}/{seed}"))
        data = b"".join(codec.encode(msg, version, body))
        back, end = codec.decode(msg, version, data)
        assert end == len(data)
        assert plain(back) == body
        assert b"".join(codec.encode(msg, version, back)) == data


# ---------------------------------------------------------------- kafka-python

kp_api = pytest.importorskip("kafka.protocol.api_message")


def _kp_classes():
    out = {}
    stack = [kp_api.ApiMessage]
    while stack:
        c = stack.pop()
        for sub in c.__subclasses__():
            stack.append(sub)
            if getattr(sub, "_class_version", 1) is None and getattr(sub, "_json", None):
                out[sub.json["name"]] = sub
    import kafka.protocol.metadata, kafka.protocol.producer, kafka.protocol.consumer  # noqa: F401
    import kafka.protocol.admin  # noqa: F401
    return out


def _kp_value(field, value):
    if value is None:
        return None
    if field.is_struct_array():
        return [field.array_of(**_kp_kwargs(field.array_of.fields, e)) for e in value]
    if field.is_struct():
        return field(**_kp_kwargs(field.fields, value))
    if field.type_str == "uuid":
        return uuid.UUID(bytes=value)
    if field.type_str == "[]uuid":
        return [uuid.UUID(bytes=x) for x in value]
    return value


def _kp_kwargs(fields, d):
    return {k: _kp_value(fields[k], v) for k, v in d.items()
            if k in fields and k != "authorized_operations"}


def _from_kp(value):
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, dict):
        return {k: _from_kp(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_kp(v) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value


def _common_versions():
    import kafka.protocol.metadata, kafka.protocol.producer, kafka.protocol.consumer  # noqa: F401
    import kafka.protocol.admin  # noqa: F401
    classes = _kp_classes()
    cases = []
    for name, cls in sorted(classes.items()):
        ours = codec.MESSAGES.get(name)
        if ours is None:
            continue
        lo_kp, hi_kp = (int(x) for x in (cls.json["validVersions"] + "-" +
                        cls.json["validVersions"]).split("-")[:2])
        lo, hi = max(lo_kp, ours.valid_versions[0]), min(hi_kp, ours.valid_versions[1])
        cases += [(name, v) for v in range(lo, hi + 1)]
    return classes, cases


KP_CLASSES, KP_CASES = _common_versions()


def _subset(ours, theirs, path=""):
    """Every key kafka-python knows agrees with ours (they may know fewer fields)."""
    if theirs is None and isinstance(ours, dict):
        return      # an absent tagged struct: None for them, Kafka's default struct for us
    if isinstance(theirs, dict):
        for k, v in theirs.items():
            if k == "authorized_operations":
                continue    # kafka-python renames *AuthorizedOperations to a bit set
            assert k in ours, f"{path}.{k}"
            _subset(ours[k], v, f"{path}.{k}")
    elif isinstance(theirs, list):
        assert len(ours) == len(theirs), path
        for a, b in zip(ours, theirs):
            _subset(a, b, path)
    else:
        assert ours == theirs, path


def test_kafka_python_cases_cover_core_apis():
    names = {n for n, _ in KP_CASES}
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "JoinGroup", "SyncGroup",
                "OffsetCommit", "OffsetFetch", "FindCoordinator", "ListOffsets"):
        assert api + "Request" in names and api + "Response" in names
    assert len(KP_CASES) > 300


def _reset_authorized_operations(value):
    """kafka-python models these as bit sets; keep them at Kafka's default."""
    if isinstance(value, dict):
        for k in value:
            if k.endswith("authorized_operations") and not k.startswith("include"):
                value[k] = -2147483648
            else:
                _reset_authorized_operations(value[k])
    elif isinstance(value, list):
        for v in value:
            _reset_authorized_operations(v)


@pytest.mark.parametrize("name,version", KP_CASES)
def test_kafka_python_agrees(name, version):
    msg, cls = codec.MESSAGES[name], KP_CLASSES[name]
    body = fill(msg, version, random.Random(f"kp/{name}/{version}"))
    _reset_authorized_operations(body)
    if name == "ApiVersionsResponse":
        body["error_code"] = 0      # kafka-python reads any error reply as v0 (KIP-511)
    ours = b"".join(codec.encode(msg, version, body))
    # they decode what we encode
    theirs = cls[version].decode(ours)
    _subset(body, _from_kp(theirs.to_dict(json=False)))
    # we decode what they encode
    obj = cls[version](**_kp_kwargs(cls.fields, body))
    data = bytes(obj.encode())
    assert plain(codec.decode(msg, version, data)[0]) == body
    if not _has_tagged_struct(msg.fields, version):
        assert data == ours
    # (kafka-python writes a tagged struct even when it equals the default struct;
    # Kafka, and we, leave it out)


def _has_tagged_struct(fields, version):
    return any(f.versions.has(version) and (
        (f.tagged_in(version) and f.is_struct and not f.is_array)
        or (f.fields and _has_tagged_struct(f.fields, version))) for f in fields)


# ---------------------------------------------------------------- aiokafka

def test_aiokafka_requests_decode():
    produce = pytest.importorskip("aiokafka.protocol.produce")
    metadata = pytest.importorskip("aiokafka.protocol.metadata")
    group = pytest.importorskip("aiokafka.protocol.group")
    data = produce.ProduceRequest_v7(transactional_id=None, required_acks=-1, timeout=1000,
                                     topics=[("t", [(3, b"batch")])]).encode()
    body = codec.decode_request(0, 7, data)
    assert plain(body) == {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 3, "records": b"batch"}]}]}
    assert codec.decode_request(3, 1, metadata.MetadataRequest_v1(topics=["a", "b"]).encode()) == \
        {"topics": [{"name": "a"}, {"name": "b"}]}
    data = group.JoinGroupRequest_v5(group="g", session_timeout=10000, rebalance_timeout=30000,
                                     member_id="", group_instance_id=None, protocol_type="consumer",
                                     group_protocols=[("range", b"\x00\x01meta")]).encode()
    assert codec.decode_request(11, 5, data) == {
        "group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 30000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01meta"}]}


def test_aiokafka_decodes_our_responses():
    fetch = pytest.importorskip("aiokafka.protocol.fetch")
    metadata = pytest.importorskip("aiokafka.protocol.metadata")
    api = pytest.importorskip("aiokafka.protocol.admin")
    data = enc_resp(1, 11, {"throttle_time_ms": 5, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "error_code": 0, "high_watermark": 10,
                                       "last_stable_offset": 10, "log_start_offset": 0,
                                       "aborted_transactions": None, "preferred_read_replica": -1,
                                       "records": b"RECS"}]}]})
    resp = fetch.FetchResponse_v11.decode(data)
    assert resp.throttle_time_ms == 5
    topic, partitions = resp.topics[0]
    assert topic == "t" and partitions[0][0] == 0 and partitions[0][2] == 10
    assert partitions[0][-1] == b"RECS"
    data = enc_resp(3, 1, {"brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
                           "controller_id": 1, "topics": []})
    resp = metadata.MetadataResponse_v1.decode(data)
    assert resp.controller_id == 1 and tuple(resp.brokers[0]) == (1, "h", 9092, None)
    data = enc_resp(18, 0, {"error_code": 0, "api_keys": [
        {"api_key": 0, "min_version": 0, "max_version": 7}]})
    resp = api.ApiVersionResponse_v0.decode(data)
    assert resp.error_code == 0 and tuple(resp.api_versions[0]) == (0, 0, 7)
