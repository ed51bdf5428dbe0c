"""Topic lifecycle in cluster mode through confluent-kafka's AdminClient: deletion
(/admin/delete_topics, logs removed everywhere), partition addition, topic configs
(/config/topics, /config/changes) seen by every broker."""
from __future__ import annotations

import json
import os

from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from tests.cluster.test_failover import create_topic, produce


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
