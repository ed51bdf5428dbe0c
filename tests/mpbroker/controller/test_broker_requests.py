"""Partitions of LeaderAndIsr / StopReplica / UpdateMetadata across versions, StopReplica's
delete flags, and their error responses (mpbroker/controller/broker_requests.py)."""
from mpbroker.controller import broker_requests
from mpbroker.protocol import codec


def roundtrip(api_key, version, body):
    """Through the real codec, as a broker receives it."""
    raw = codec.encode_request(api_key, version, body)
    return codec.decode_request(api_key, version, memoryview(raw), 0)


def test_leader_and_isr_versions():
    ps = {"partition_index": 3, "controller_epoch": 1, "leader": 1, "leader_epoch": 0, "isr": [1],
          "partition_epoch": 0, "replicas": [1]}
    tid = bytes(range(16))
    v5 = roundtrip(4, 5, {"controller_id": 1, "controller_epoch": 1, "topic_states": [
        {"topic_name": "t", "topic_id": tid, "partition_states": [ps]}], "live_leaders": []})
    parts = broker_requests.partitions(4, 5, v5)
    assert parts == [("t", 3, tid)]
    resp = broker_requests.response(4, 5, parts, {("t", 3): 0}, 0)
    assert resp == {"error_code": 0, "topics": [{"topic_id": tid, "partition_errors": [
        {"partition_index": 3, "error_code": 0}]}]}
    codec.encode_response(4, 5, resp)
    v1 = roundtrip(4, 1, {"controller_id": 1, "controller_epoch": 1, "ungrouped_partition_states": [
        dict(ps, topic_name="u")], "live_leaders": []})
    parts = broker_requests.partitions(4, 1, v1)
    assert parts == [("u", 3, None)]
    resp = broker_requests.response(4, 1, parts, {}, 11)
    assert resp["partition_errors"] == [{"topic_name": "u", "partition_index": 3, "error_code": 11}]
    codec.encode_response(4, 1, resp)


def test_stop_replica_and_update_metadata_versions():
    v3 = roundtrip(5, 3, {"controller_id": 1, "controller_epoch": 2, "topic_states": [
        {"topic_name": "t", "partition_states": [{"partition_index": 0, "delete_partition": True}]}]})
    assert broker_requests.partitions(5, 3, v3) == [("t", 0, None)]
    v1 = roundtrip(5, 1, {"controller_id": 1, "controller_epoch": 2, "delete_partitions": True,
                          "topics": [{"name": "t", "partition_indexes": [1, 2]}]})
    assert broker_requests.partitions(5, 1, v1) == [("t", 1, None), ("t", 2, None)]
    v0 = roundtrip(5, 0, {"controller_id": 1, "controller_epoch": 2, "delete_partitions": False,
                          "ungrouped_partitions": [{"topic_name": "x", "partition_index": 4}]})
    assert broker_requests.partitions(5, 0, v0) == [("x", 4, None)]
    codec.encode_response(5, 3, broker_requests.response(5, 3, broker_requests.partitions(5, 3, v3), {}, 77))
    # the delete flags: per partition from v3, one per request before
    v3b = roundtrip(5, 3, {"controller_id": 1, "controller_epoch": 2, "topic_states": [
        {"topic_name": "t", "partition_states": [{"partition_index": 0, "delete_partition": True},
                                                 {"partition_index": 1, "delete_partition": False}]}]})
    assert broker_requests.stop_deletes(3, v3b) == {("t", 0): True, ("t", 1): False}
    assert broker_requests.stop_deletes(1, v1) == {("t", 1): True, ("t", 2): True}
    assert broker_requests.stop_deletes(0, v0) == {("x", 4): False}
    um = roundtrip(6, 7, {"controller_id": 1, "controller_epoch": 2, "topic_states": [
        {"topic_name": "t", "topic_id": bytes(16), "partition_states": [
            {"partition_index": 0, "controller_epoch": 2, "leader": 1, "leader_epoch": 0, "isr": [1],
             "zk_version": 0, "replicas": [1]}]}], "live_brokers": []})
    assert broker_requests.partitions(6, 7, um) == [("t", 0, bytes(16))]
    assert broker_requests.response(6, 7, [], {}, 0) == {"error_code": 0}
