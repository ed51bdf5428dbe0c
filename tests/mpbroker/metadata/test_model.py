"""Tests for mpbroker.metadata.model (pure); the store's files: test_store.py."""
import json
import random

import pytest

from mpbroker.metadata import model as m
from mpbroker.metadata.model import Broker, ErrorCode, MetadataError, PartitionState


def cluster(n_brokers=3):
    md = m.new_cluster_metadata("AAAAAAAAAAAAAAAAAAAAAQ")
    for i in range(n_brokers):
        md = m.register_broker(md, Broker(i, "127.0.0.1", 9092 + i))
    return md


def code_of(fn, *a, **kw):
    with pytest.raises(MetadataError) as e:
        fn(*a, **kw)
    return e.value.code, e.value.message


# ------------------------------------------------------------------ names

@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 249, "__consumer_offsets", "..."])
def test_legal_topic_names(name):
    m.validate_topic_name(name)


@pytest.mark.parametrize("name,msg", [
    ("", "Topic name is illegal, it can't be empty"),
    (".", 'Topic name cannot be "." or ".."'),
    ("..", 'Topic name cannot be "." or ".."'),
    ("x" * 250, "can't be longer than 249 characters"),
    ("a b", "contains a character other than ASCII alphanumerics, '.', '_' and '-'"),
    ("é", "contains a character other than ASCII"),
    ("a/b", "contains a character"),
])
def test_illegal_topic_names(name, msg):
    code, message = code_of(m.validate_topic_name, name)
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION == 17
    assert msg in message


def test_collision_of_dot_and_underscore():
    md = m.create_topic(cluster(), "metrics.cpu", 1, 1, rng=random.Random(1))
    code, msg = code_of(m.create_topic, md, "metrics_cpu", 1, 1)
    assert code == 17 and msg == "Topic 'metrics_cpu' collides with existing topics: metrics.cpu"
    assert m.has_collision_chars("a.b") and not m.has_collision_chars("ab")


# ------------------------------------------------------------------ assignment

def test_rack_unaware_assignment_matches_kafka_example():
    # Kafka's AdminUtils doc example: 5 brokers, 10 partitions, rf 3, start 0.
    a = m.assign_replicas(10, 3, [0, 1, 2, 3, 4], fixed_start_index=0)
    assert a == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_assignment_sorts_brokers_and_balances_leaders():
    a = m.assign_replicas(6, 2, [12, 10, 11], fixed_start_index=1)
    assert [r[0] for r in a.values()] == [11, 12, 10, 11, 12, 10]
    assert all(len(set(r)) == 2 for r in a.values())


def test_assignment_errors():
    assert code_of(m.assign_replicas, 0, 1, [0])[0] == ErrorCode.INVALID_PARTITIONS
    assert code_of(m.assign_replicas, 1, 0, [0])[0] == ErrorCode.INVALID_REPLICATION_FACTOR
    code, msg = code_of(m.assign_replicas, 1, 4, [0, 1, 2])
    assert code == 38 and msg == "Replication factor: 4 larger than available brokers: 3."


# ------------------------------------------------------------------ create / delete

def test_create_topic_bumps_epoch_and_sets_leaders():
    md0 = cluster()
    md = m.create_topic(md0, "orders", 4, 2, configs={"retention.ms": "1000"}, rng=random.Random(3))
    assert md.epoch == md0.epoch + 1 and md0.topics == {}       # the input is untouched
    t = md.topics["orders"]
    assert len(t.topic_id) == 16 and t.topic_id != bytes(16)
    assert sorted(t.partitions) == [0, 1, 2, 3] and t.replication_factor == 2
    for p in t.partitions.values():
        assert p.leader == p.replicas[0] and p.isr == p.replicas and p.leader_epoch == 0
    assert t.configs == {"retention.ms": "1000"} and not t.is_internal
    assert md.topic_by_id(t.topic_id) is t


def test_topics_by_id_index_each_metadata_object_and_do_not_travel():
    import pickle
    md = m.create_topic(cluster(1), "a", 1, 1, rng=random.Random(1))
    a = md.topics["a"]
    assert md.topic_by_id(a.topic_id) is a and md.topics_by_id == {a.topic_id: a}
    md2 = m.create_topic(md, "b", 1, 1, rng=random.Random(2))   # a new object, its own index
    assert set(md2.topics_by_id) == {a.topic_id, md2.topics["b"].topic_id}
    with pytest.raises(MetadataError):
        m.delete_topic(md2, "a").topic_by_id(a.topic_id)
    copy = pickle.loads(pickle.dumps(md2))        # what a worker is sent: no index
    assert copy == md2 and "topics_by_id" not in vars(copy)
    assert copy.topic_by_id(a.topic_id) == a


def test_create_topic_defaults_and_internal():
    md = m.create_topic(cluster(1), "__consumer_offsets", configs={"cleanup.policy": "compact"},
                        default_partitions=3, default_replication_factor=1)
    t = md.topics["__consumer_offsets"]
    assert t.is_internal and len(t.partitions) == 3


def test_create_topic_errors():
    md = m.create_topic(cluster(), "t", 1, 1)
    assert code_of(m.create_topic, md, "t", 1, 1) == (36, "Topic 't' already exists.")
    assert code_of(m.create_topic, md, "bad name", 1, 1)[0] == 17
    assert code_of(m.create_topic, md, "u", 0, 1)[0] == 37
    assert code_of(m.create_topic, md, "u", 1, 5)[0] == 38
    assert code_of(m.create_topic, md, "u", 1, 1, configs={"retention.ms": "x"}) == (
        40, "Invalid value x for configuration retention.ms: Not a number of type LONG")
    assert code_of(m.create_topic, md, "u", 1, 1, configs={"nope": "1"})[0] == 40
    assert code_of(m.create_topic, md, "u", 2, -1, assignments={0: [0]})[0] == ErrorCode.INVALID_REQUEST
    assert code_of(m.create_topic, md, "u", assignments={0: [0], 2: [1]})[0] == 39
    assert code_of(m.create_topic, md, "u", assignments={0: [0, 0]})[0] == 39
    assert code_of(m.create_topic, md, "u", assignments={0: [0, 1], 1: [2]})[0] == 39
    code, msg = code_of(m.create_topic, md, "u", assignments={0: [7]})
    assert code == 39 and "Unknown broker(s) in replica assignment: 7" in msg


def test_create_with_explicit_assignment():
    md = m.create_topic(cluster(), "t", assignments={0: [2, 0], 1: [1, 2]})
    assert md.topics["t"].assignment() == {0: (2, 0), 1: (1, 2)}
    assert md.topics["t"].partitions[0].leader == 2


def test_assignment_to_unregistered_broker_is_rejected():
    md = m.unregister_broker(cluster(2), 1)
    code, msg = code_of(m.create_topic, md, "t", assignments={0: [1, 0]})
    assert code == 39 and "Unknown broker(s) in replica assignment: 1." in msg


def test_delete_topic():
    md = m.create_topic(cluster(), "t", 1, 1)
    tid = md.topics["t"].topic_id
    md2 = m.delete_topic(md, "t")
    assert "t" not in md2.topics and md2.epoch == md.epoch + 1
    assert code_of(m.delete_topic, md2, "t")[0] == 3
    assert code_of(m.delete_topic_by_id, md2, tid)[0] == 100
    assert "t" not in m.delete_topic_by_id(md, tid).topics


# ------------------------------------------------------------------ partitions

def test_add_partitions_continues_kafka_pattern():
    md = m.create_topic(cluster(), "t", 2, 2, rng=random.Random(5))
    md2 = m.add_partitions(md, "t", 5)
    t = md2.topics["t"]
    assert sorted(t.partitions) == [0, 1, 2, 3, 4]
    assert t.partitions[0] == md.topics["t"].partitions[0]          # untouched
    assert all(len(p.replicas) == 2 for p in t.partitions.values())
    start = sorted(md.brokers).index(t.partitions[0].replicas[0])
    expected = m.assign_replicas(3, 2, md.brokers, fixed_start_index=start, start_partition_id=2)
    assert {p: list(t.partitions[p].replicas) for p in (2, 3, 4)} == expected


def test_add_partitions_rules():
    md = m.create_topic(cluster(), "t", 3, 2)
    assert code_of(m.add_partitions, md, "t", 2) == (
        37, "Topic currently has 3 partitions, which is higher than the requested 2.")
    assert code_of(m.add_partitions, md, "t", 3) == (37, "Topic already has 3 partitions.")
    assert code_of(m.add_partitions, md, "nope", 4)[0] == 3
    assert code_of(m.add_partitions, md, "t", 5, [[0, 1]]) == (
        39, "Increasing the number of partitions by 2 but 1 assignments provided.")
    code, msg = code_of(m.add_partitions, md, "t", 4, [[0]])
    assert code == 39 and msg.startswith("Inconsistent replication factor between partitions")
    assert code_of(m.add_partitions, md, "t", 4, [[1, 1]])[0] == 39
    assert code_of(m.add_partitions, md, "t", 4, [[1, 9]])[0] == 39
    md2 = m.add_partitions(md, "t", 4, [[2, 0]])
    assert md2.topics["t"].partitions[3].replicas == (2, 0)


def test_update_partition_and_configs():
    md = m.create_topic(cluster(), "t", 1, 3, rng=random.Random(2))
    p = md.partition("t", 0)
    new = PartitionState(0, p.replicas[1], p.leader_epoch + 1, p.replicas, p.replicas[1:])
    md2 = m.update_partition(md, "t", new)
    assert md2.partition("t", 0).leader == p.replicas[1]
    assert md2.partition("t", 0).partition_epoch == 1
    stale = PartitionState(0, p.replicas[0], 0, p.replicas, p.replicas)
    assert code_of(m.update_partition, md2, "t", stale)[0] == ErrorCode.INVALID_REQUEST
    assert code_of(md2.partition, "t", 5)[0] == 3
    md3 = m.set_topic_configs(md2, "t", {"cleanup.policy": "compact"})
    assert md3.topics["t"].configs == {"cleanup.policy": "compact"}
    assert code_of(m.set_topic_configs, md2, "t", {"cleanup.policy": "x"})[0] == 40
    assert m.set_controller(md3, 1).controller_id == 1


# ------------------------------------------------------------------ ids

def test_cluster_and_topic_ids_are_kafka_uuids():
    cid = m.generate_cluster_id(random.Random(1))
    assert len(cid) == 22 and not cid.startswith("-")
    assert all(c.isalnum() or c in "-_" for c in cid)
    raw = m.uuid_from_str(cid)
    assert len(raw) == 16 and m.uuid_to_str(raw) == cid
    assert m.uuid_to_str(bytes(16)) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_roundtrip_dict():
    md = m.create_topic(cluster(), "t", 3, 2, configs={"segment.bytes": "1048576"})
    md = m.set_controller(md, 0)
    d = json.loads(json.dumps(m.to_dict(md)))
    assert m.from_dict(d) == md


# ------------------------------------------------------------------ store

# ------------------------------------------------------------------ limits (issue #15)

def test_topic_batch_creates_many_topics_in_one_epoch_with_kafka_checks():
    md = cluster(1)
    batch = m.TopicBatch(md)
    for i in range(300):
        batch.create(f"t.{i}", 1, 1)
    assert code_of(batch.create, "t_5", 1, 1)[0] == ErrorCode.INVALID_TOPIC_EXCEPTION   # collides with t.5
    assert code_of(batch.create, "t.7", 1, 1)[0] == ErrorCode.TOPIC_ALREADY_EXISTS
    new = batch.result()
    assert new.epoch == md.epoch + 1 and len(new.topics) == 300 and md.topics == {}
    assert m.TopicBatch(new).result() is new         # nothing created: the same metadata


def test_topic_batch_is_linear_in_the_number_of_topics(monkeypatch):
    # the collision check looked at every existing topic for each new one (quadratic);
    # count its work instead of timing it
    calls = []
    real = m.unify_collision_chars
    monkeypatch.setattr(m, "unify_collision_chars", lambda n: calls.append(n) or real(n))
    md = m.TopicBatch(cluster(1))
    for i in range(1000):
        md.create(f"x.{i}", 1, 1)
    md = md.result()
    calls.clear()
    batch = m.TopicBatch(md)
    for i in range(1000):
        batch.create(f"y.{i}", 1, 1)
    assert len(batch.result().topics) == 2000
    assert len(calls) <= 1000 + 2 * 1000      # one index build + a lookup and an insert per topic


def test_one_request_may_not_create_more_than_9999_partitions():
    md = cluster(1)
    code, msg = code_of(m.create_topic, md, "huge", 1_000_000, 1)
    assert code == ErrorCode.POLICY_VIOLATION and msg == "Excessively large number of partitions per request."
    md = m.create_topic(md, "t", 1, 1)
    assert code_of(m.add_partitions, md, "t", 1_000_001)[0] == ErrorCode.POLICY_VIOLATION
    assert len(m.create_topic(md, "ok", m.MAX_PARTITIONS_PER_REQUEST, 1).topics["ok"].partitions) == 9999


def test_broker_and_cluster_partition_caps():
    md = cluster(2)
    limits = m.PartitionLimits(max_broker_partitions=10, max_partitions=8)
    batch = m.TopicBatch(md, limits)
    batch.create("a", 6, 2)                          # 6 partitions, 6 replicas on each broker
    code, msg = code_of(batch.create, "b", 3, 2)
    assert code == ErrorCode.POLICY_VIOLATION and "max.partitions" in msg and "9 partitions" in msg
    batch.create("c", 2, 1)                          # 8 partitions in all
    md = batch.result()
    assert set(md.topics) == {"a", "c"}
    code, msg = code_of(m.add_partitions, md, "c", 3, limits=limits)
    assert code == ErrorCode.POLICY_VIOLATION and "max.partitions" in msg
    tight = m.PartitionLimits(max_broker_partitions=8)      # 7 replicas on each broker now
    code, msg = code_of(m.add_partitions, md, "a", 8, limits=tight)
    assert code == ErrorCode.POLICY_VIOLATION and "max.broker.partitions" in msg and "broker " in msg
    assert len(m.add_partitions(md, "c", 3, limits=tight).topics["c"].partitions) == 3
    # internal topics are counted but never refused
    exempt = m.TopicBatch(md, m.PartitionLimits(max_partitions=1))
    exempt.create("__consumer_offsets", 5, 1, exempt_from_limits=True)


def test_admit_is_asked_last_and_refusal_is_throttling_quota_exceeded():
    md = cluster(1)
    asked = []

    def admit(n):
        asked.append(n)
        return False
    batch = m.TopicBatch(md)
    assert code_of(batch.create, "bad name!", 1, 1, admit=admit)[0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert asked == []
    assert code_of(batch.create, "t", 4, 1, admit=admit)[0] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert asked == [4] and batch.result() is md
    assert code_of(m.add_partitions, m.create_topic(md, "u", 1, 1), "u", 3, admit=admit)[0] \
        == ErrorCode.THROTTLING_QUOTA_EXCEEDED


def test_delete_topics_in_one_epoch():
    md = cluster(1)
    for n in ("a", "b", "c"):
        md = m.create_topic(md, n, 1, 1)
    out = m.delete_topics(md, ["a", "c"])
    assert set(out.topics) == {"b"} and out.epoch == md.epoch + 1
    assert code_of(m.delete_topics, md, ["a", "zz"])[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_partition_growth_counts_once_and_bounds_the_request(monkeypatch):
    batch = m.TopicBatch(cluster(1))
    for i in range(500):
        batch.create(f"g{i}", 1, 1)
    md = batch.result()
    calls = []
    real = m.partition_counts
    monkeypatch.setattr(m, "partition_counts", lambda md: calls.append(1) or real(md))
    growth = m.PartitionGrowth(md, m.PartitionLimits(max_broker_partitions=100_000))
    for i in range(500):
        growth.grow(f"g{i}", 2)
    out = growth.result()
    assert len(calls) == 1 and out.epoch == md.epoch + 1
    assert all(len(out.topics[f"g{i}"].partitions) == 2 for i in range(500))
    growth = m.PartitionGrowth(md)
    growth.grow("g0", 5001)
    assert code_of(growth.grow, "g1", 5001)[0] == ErrorCode.POLICY_VIOLATION   # 10,000 new in all
    assert code_of(growth.grow, "nope", 2)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_broker_answers_the_address_of_the_listener_asked_for():
    """Issue #17: Metadata/FindCoordinator answer the client's listener's endpoint;
    a broker without that listener is left out; older metadata (no endpoints) has one."""
    b = Broker(1, "10.0.0.1", 9095, None, (("INTERNAL", "10.0.0.1", 9095), ("SSL", "h", 9093)))
    assert b.address("SSL") == ("h", 9093) and b.address("PLAINTEXT") is None
    assert b.address(None) == ("10.0.0.1", 9095)
    assert Broker(2, "h", 9092).address("SSL") == ("h", 9092)
    md = m.register_broker(m.ClusterMetadata("c"), b)
    assert m.from_dict(json.loads(json.dumps(m.to_dict(md)))).brokers[1] == b


def test_a_topic_shown_in_part_keeps_its_partition_count_across_the_dict():
    md = m.create_topic(cluster(), "t", 3, 1)
    t = md.topics["t"]
    part = m.Topic(t.name, t.topic_id, {0: t.partitions[0]}, {}, False, 3)
    assert part.num_partitions == 3 and t.num_partitions == 3 and t.partition_count == -1
    md2 = m.ClusterMetadata(md.cluster_id, md.controller_id, md.brokers, {"t": part}, md.epoch)
    d = json.loads(json.dumps(m.to_dict(md2)))
    assert m.from_dict(d).topics["t"].num_partitions == 3
    assert "partition_count" not in m.to_dict(md)["topics"][0]     # whole topics: as before
