"""Topic lifecycle in cluster mode through confluent-kafka's AdminClient: deletion
(/admin/delete_topics, logs removed everywhere; with a replica down the deletion waits
for it and completes when it is back), partition addition, topic configs
(/config/topics, /config/changes) seen by every broker."""
from __future__ import annotations

import json
import os

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from tests.cluster.test_failover import consume, create_topic, produce


def test_delete_topic_everywhere(cluster):
    c = cluster(3)
    create_topic(c, "del", partitions=2, rf=3)
    produce(c.bootstrap, "del", [b"x"] * 5)
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.delete_topics(["del"], operation_timeout=30)["del"].result(30)
    zk = c.zk_client()
    assert not zk.exists("/brokers/topics/del") and not zk.exists("/admin/delete_topics/del")
    for b in c.brokers.values():
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
        assert "del" not in md.topics
    c.wait_for(lambda: not any(os.path.exists(b.data_dir / f"del-{p}")
                               for b in c.brokers.values() for p in range(2)), 15, "logs deleted")
    # the name can be used again at once
    create_topic(c, "del", partitions=1, rf=2)


def test_create_partitions_and_topic_configs(cluster):
    c = cluster(3)
    create_topic(c, "grow", partitions=1, rf=2)
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_partitions([NewPartitions("grow", 4)], operation_timeout=30)["grow"].result(30)
    zk = c.zk_client()
    tz = json.loads(zk.get("/brokers/topics/grow")[0])
    assert sorted(tz["partitions"]) == ["0", "1", "2", "3"]
    assert all(len(r) == 2 for r in tz["partitions"].values())
    for p in range(4):
        assert c.state("grow", p)["leader"] in tz["partitions"][str(p)]
    for b in c.brokers.values():
        c.wait_for(lambda: len(AdminClient({"bootstrap.servers": b.bootstrap})
                               .list_topics("grow", timeout=10).topics["grow"].partitions) == 4,
                   10, "4 partitions everywhere")
    res = ConfigResource("topic", "grow", set_config={"retention.ms": "12345"})
    a.alter_configs([res])[res].result(20)
    assert json.loads(zk.get("/config/topics/grow")[0]) == {"version": 1,
                                                             "config": {"retention.ms": "12345"}}
    changes = zk.get_children("/config/changes")
    assert any(json.loads(zk.get(f"/config/changes/{ch}")[0]) ==
               {"version": 2, "entity_path": "topics/grow"} for ch in changes)

    def described(b):
        r = ConfigResource("topic", "grow")
        client = AdminClient({"bootstrap.servers": b.bootstrap})     # alive until the result is in
        cfg = client.describe_configs([r])[r].result(10)
        return cfg["retention.ms"].value == "12345"
    for b in c.brokers.values():
        c.wait_for(lambda: described(b), 10, f"{b.name} sees the new config")


def create_on(c, name, replicas):
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic(name, 1, replica_assignment=[replicas])],
                    operation_timeout=30, request_timeout=30)[name].result(30)


@pytest.mark.slow
def test_delete_while_a_replica_is_down_completes_when_it_returns(cluster):
    """The auditor's scenario: topic x on brokers [2, 3], broker 3 killed, x deleted,
    broker 3 restarted, x created again on [2, 3]. Kafka keeps the deletion pending until
    broker 3 answered StopReplica(delete=true); broker 3 deletes its old log; the new x
    is replicated to both."""
    c = cluster(3)
    zk = c.zk_client()
    create_on(c, "x", [2, 3])
    produce(c.bootstrap, "x", [b"old"])
    c.wait_for(lambda: sorted(c.state("x", 0)["isr"]) == [2, 3], 20, "x replicated")
    c.kill(3)
    c.wait_for(lambda: 3 not in c.live_ids(), 20, "broker 3 gone")
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.delete_topics(["x"], operation_timeout=30)["x"].result(30)
    # hidden from every broker, broker 2's log gone, the deletion pending for broker 3
    for i in (1, 2):
        md = AdminClient({"bootstrap.servers": c.brokers[i].bootstrap}).list_topics(timeout=10)
        assert "x" not in md.topics
    c.wait_for(lambda: not os.path.exists(c.brokers[2].data_dir / "x-0"), 15, "x-0 gone on 2")
    assert zk.exists("/admin/delete_topics/x") and zk.exists("/brokers/topics/x")
    with pytest.raises(KafkaException, match="marked for deletion"):
        create_on(c, "x", [2, 3])
    assert os.path.exists(c.brokers[3].data_dir / "x-0")
    c.start(3)
    c.wait_for(lambda: not zk.exists("/brokers/topics/x") and not zk.exists("/admin/delete_topics/x"),
               30, "the deletion completed once broker 3 was back")
    # broker 3 answered once x left its view; the worker owning x-0 deletes it when it
    # applies that view (maybe only just starting)
    c.wait_for(lambda: not os.path.exists(c.brokers[3].data_dir / "x-0"), 15, "x-0 gone on 3")
    create_on(c, "x", [2, 3])
    produce(c.bootstrap, "x", [b"new"], acks="all")
    c.wait_for(lambda: sorted(c.state("x", 0)["isr"]) == [2, 3], 20, "the new x replicated to 3")
    assert consume(c.bootstrap, "x", 0, 0, 1) == [b"new"]
    assert "Traceback" not in c.brokers[3].log_text()
