"""workers/handlers/metadata.py: topics named, all or by id, per-partition leader
errors, and auto-creation (which names are asked for, the per-request partition bound,
and what the controller's answers become)."""
from __future__ import annotations

import asyncio
import types

from mpbroker.config import BrokerConfig
from mpbroker.metadata import model as m
from mpbroker.metadata.model import MAX_PARTITIONS_PER_REQUEST, Broker
from mpbroker.protocol.errors import ErrorCode
from workers.handlers import metadata as mh

NS = types.SimpleNamespace


class FakeController:
    def __init__(self, answers=None):
        self.asked, self.answers = [], answers or {}

    async def create_topics(self, specs, validate_only, timeout_ms, quota):
        self.asked.append([s["name"] for s in specs])
        return [{"name": s["name"], "error_code": self.answers.get(s["name"], 0)} for s in specs]


def make_broker(tmp_path, auto_create=True, num_partitions=1, answers=None):
    md = m.register_broker(m.new_cluster_metadata("AAAAAAAAAAAAAAAAAAAAAQ"), Broker(1, "h", 9092))
    md = m.create_topic(md, "t", 2, 1)
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "auto.create.topics.enable": str(auto_create).lower(),
                        "num.partitions": str(num_partitions)}, cpu_count=1)
    return NS(metadata=md, config=cfg, controller=FakeController(answers),
              topic_name_for_id=lambda tid: next((t.name for t in md.topics.values()
                                                  if t.topic_id == tid), None))


def ask(broker, topics, version=12, allow=True):
    req = {"topics": None if topics is None else [
        {"name": n} if isinstance(n, str) else {"name": None, "topic_id": n} for n in topics],
        **({} if allow is None else {"allow_auto_topic_creation": allow})}
    out = mh.handle(broker, NS(api_version=version, client_id="c"), req)
    return asyncio.run(out) if asyncio.iscoroutine(out) else out


def codes(resp):
    return {t["name"]: t["error_code"] for t in resp["topics"]}


def test_all_topics_v0_empty_list_v1_null_and_by_id(tmp_path):
    b = make_broker(tmp_path)
    assert codes(ask(b, [], version=0)) == {"t": 0}
    assert codes(ask(b, None)) == {"t": 0} and codes(ask(b, [])) == {}
    tid = b.metadata.topics["t"].topic_id
    assert codes(ask(b, [tid])) == {"t": 0}
    (gone,) = ask(b, [bytes(range(16))])["topics"]
    assert gone["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID and gone["topic_id"] == bytes(range(16))
    resp = ask(b, ["t"])
    assert [p["partition_index"] for p in resp["topics"][0]["partitions"]] == [0, 1]
    assert resp["brokers"] == [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]


def test_a_partition_whose_leader_is_not_registered_is_leader_not_available(tmp_path):
    b = make_broker(tmp_path)
    st = b.metadata.topics["t"].partitions[1]
    b.metadata.topics["t"].partitions[1] = NS(leader=7, leader_epoch=st.leader_epoch,
                                               replicas=[7], isr=[7], offline_replicas=[])
    parts = ask(b, ["t"])["topics"][0]["partitions"]
    assert [p["error_code"] for p in parts] == [0, ErrorCode.LEADER_NOT_AVAILABLE]


def test_auto_creation_asks_the_controller_for_new_valid_names_once(tmp_path):
    b = make_broker(tmp_path, answers={"refused": ErrorCode.INVALID_REPLICATION_FACTOR})
    resp = ask(b, ["t", "new", "new", "bad/name", "__consumer_offsets", "refused"])
    assert b.controller.asked == [["new", "refused"]]
    assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [
        ("t", 0), ("new", ErrorCode.LEADER_NOT_AVAILABLE), ("new", ErrorCode.LEADER_NOT_AVAILABLE),
        ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("__consumer_offsets", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("refused", ErrorCode.INVALID_REPLICATION_FACTOR)]


def test_without_auto_creation_unknown_topics_are_unknown(tmp_path):
    for b, allow in ((make_broker(tmp_path, auto_create=False), True), (make_broker(tmp_path), False)):
        assert codes(ask(b, ["new"], allow=allow)) == {"new": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert b.controller.asked == []
    # before v4 the request has no allow_auto_topic_creation: auto-creation is on
    b = make_broker(tmp_path)
    ask(b, ["new"], version=3, allow=None)
    assert b.controller.asked == [["new"]]


def test_one_request_asks_for_no_more_partitions_than_one_create_topics_may_make(tmp_path):
    per_topic = MAX_PARTITIONS_PER_REQUEST // 2
    b = make_broker(tmp_path, num_partitions=per_topic)
    resp = ask(b, ["a", "b", "c"])
    assert b.controller.asked == [["a", "b"]]
    assert codes(resp)["c"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
