"""Znode JSON of Kafka's ZK mode (mpbroker/controller/zkdata.py)."""
import json

import pytest

from mpbroker.controller import zkdata


def test_broker_registration_is_kafkas_v5_json():
    d = json.loads(zkdata.broker_json(3, "h", 9092, now_ms=123))
    assert d == {"listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                 "endpoints": ["PLAINTEXT://h:9092"], "jmx_port": -1, "features": {},
                 "host": "h", "timestamp": "123", "port": 9092, "version": 5}
    b = zkdata.parse_broker(3, zkdata.broker_json(3, "h", 9092, rack="r1"), czxid=77)
    assert (b.id, b.host, b.port, b.rack, b.epoch) == (3, "h", 9092, "r1", 77)
    # a registration written by Kafka with several listeners: PLAINTEXT wins
    kafka = (b'{"listener_security_protocol_map":{"SSL":"SSL","PLAINTEXT":"PLAINTEXT"},'
             b'"endpoints":["SSL://a:9093","PLAINTEXT://a:9092"],"jmx_port":-1,"host":"a",'
             b'"timestamp":"1","port":9092,"version":4}')
    assert zkdata.parse_broker(1, kafka).port == 9092
    with pytest.raises(zkdata.ZkDataError):
        zkdata.parse_broker(1, b"{nope")


def test_topic_and_state_roundtrip():
    tid = bytes(range(16))
    data = zkdata.topic_json(tid, {1: [2, 3], 0: [1, 2]})
    d = json.loads(data)
    assert d["version"] == 3 and d["partitions"] == {"0": [1, 2], "1": [2, 3]}
    assert d["adding_replicas"] == {} and d["removing_replicas"] == {}
    ta = zkdata.parse_topic("t", data)
    assert ta.topic_id == tid and ta.partitions == {0: (1, 2), 1: (2, 3)}
    st = zkdata.LeaderAndIsr(2, 5, (2, 3), 7)
    assert json.loads(zkdata.state_json(st)) == {"controller_epoch": 7, "leader": 2, "version": 1,
                                            "leader_epoch": 5, "isr": [2, 3]}
    assert zkdata.parse_state(zkdata.state_json(st), 4) == zkdata.LeaderAndIsr(2, 5, (2, 3), 7, 4)
    with pytest.raises(zkdata.ZkDataError):
        zkdata.parse_state(b'{"leader":1}')
    with pytest.raises(zkdata.ZkDataError):
        zkdata.parse_topic("t", b'{"version":3,"partitions":{"0":["x"]}}')


def test_controller_cluster_id_and_paths():
    assert json.loads(zkdata.controller_json(2, 5)) == {"version": 1, "brokerid": 2, "timestamp": "5"}
    assert zkdata.parse_controller(b'{"version":1,"brokerid":4,"timestamp":"1"}') == 4
    assert zkdata.parse_controller(b"3") == 3
    assert json.loads(zkdata.cluster_id_json("abc")) == {"version": "1", "id": "abc"}
    assert zkdata.parse_cluster_id(zkdata.cluster_id_json("abc")) == "abc"
    assert zkdata.parse_state_path("/brokers/topics/a.b/partitions/12/state") == ("a.b", 12)
    assert zkdata.parse_state_path("/brokers/topics/a/partitions/1") is None
    assert zkdata.split_connect("h1:1,h2:2/kafka/x") == ("h1:1,h2:2", "/kafka/x")
    assert zkdata.split_connect("h1:1") == ("h1:1", "")
    with pytest.raises(ValueError):
        zkdata.split_connect("h:1/a//b")


def test_producer_id_blocks_and_admin_formats():
    assert zkdata.next_producer_id_block_start(b"") == 0
    blk = zkdata.producer_id_block_json(1, 1000)
    assert json.loads(blk) == {"version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"}
    assert zkdata.next_producer_id_block_start(blk) == 2000
    assert zkdata.parse_partitions(zkdata.partitions_json([("t", 1)])) == [("t", 1)]
    assert zkdata.parse_reassignment(zkdata.reassignment_json({("t", 0): [3, 1]})) == {("t", 0): (3, 1)}
    assert zkdata.parse_config(zkdata.config_json({"a": "1"})) == {"a": "1"}
    assert json.loads(zkdata.config_change_json("topics/t")) == {"version": 2, "entity_path": "topics/t"}


def test_every_listener_is_registered_and_the_inter_broker_one_is_the_address():
    """Issue #17: the registration lists every advertised listener with its protocol;
    readers take the inter-broker listener's endpoint as the broker's address."""
    eps = (("INTERNAL", "10.0.0.1", 9095, "SASL_SSL"), ("PLAINTEXT", "h", 9092, "PLAINTEXT"),
           ("SSL", "h", 9093, "SSL"))
    d = json.loads(zkdata.broker_json(3, "10.0.0.1", 9095, now_ms=1, endpoints=eps))
    assert d["listener_security_protocol_map"] == {"INTERNAL": "SASL_SSL", "PLAINTEXT": "PLAINTEXT",
                                                   "SSL": "SSL"}
    assert d["endpoints"] == ["INTERNAL://10.0.0.1:9095", "PLAINTEXT://h:9092", "SSL://h:9093"]
    assert (d["host"], d["port"]) == ("h", 9092)          # Kafka's: the PLAINTEXT listener's
    data = zkdata.broker_json(3, "10.0.0.1", 9095, endpoints=eps)
    b = zkdata.parse_broker(3, data, listener="INTERNAL")
    assert (b.host, b.port) == ("10.0.0.1", 9095)
    assert b.endpoints == (("INTERNAL", "10.0.0.1", 9095), ("PLAINTEXT", "h", 9092), ("SSL", "h", 9093))
    assert zkdata.parse_broker(3, data).port == 9092
