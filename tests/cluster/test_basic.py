"""Cluster mode against a real ZooKeeper and real brokers: registration, cluster id,
meta.properties, controller election, topics with RF=3."""
from __future__ import annotations

import json
import os
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic




def admin(c):
    return AdminClient({"bootstrap.servers": c.bootstrap, "socket.timeout.ms": 10000})


def create_topic(c, name, partitions=3, rf=3, config=None):
    a = admin(c)      # keep the client alive until the result is in
    fs = a.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                         operation_timeout=30, request_timeout=30)
    fs[name].result(30)


def topic_md(c, name, bootstrap=None):
    a = AdminClient({"bootstrap.servers": bootstrap or c.bootstrap})
    md = a.list_topics(name, timeout=10)
    return md


def test_three_brokers_register_and_elect_one_controller(cluster):
    c = cluster(3)
    zk = c.zk_client()
    assert c.live_ids() == [1, 2, 3]
    reg = json.loads(zk.get("/brokers/ids/2")[0])
    assert reg["version"] == 5 and reg["jmx_port"] == -1
    assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{c.brokers[2].port}"]
    assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    cid, epoch = c.controller()
    assert cid in (1, 2, 3) and epoch >= 1
    cluster_id = json.loads(zk.get("/cluster/id")[0])
    assert cluster_id["version"] == "1"
    # every broker answers Metadata with all brokers and the controller
    for b in c.brokers.values():
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        assert md.controller_id == cid
        assert md.cluster_id == cluster_id["id"]
        props = (b.data_dir / "meta.properties").read_text()
        assert f"cluster.id={cluster_id['id']}" in props


def test_topic_rf3_leaders_and_isr_from_every_broker(cluster):
    c = cluster(3)
    create_topic(c, "t3", partitions=3, rf=3)
    zk = c.zk_client()
    tz = json.loads(zk.get("/brokers/topics/t3")[0])
    assert tz["version"] == 3 and len(tz["partitions"]) == 3
    assert all(sorted(r) == [1, 2, 3] for r in tz["partitions"].values())
    for p in range(3):
        st = c.state("t3", p)
        assert st["version"] == 1 and st["leader"] == tz["partitions"][str(p)][0]
        assert sorted(st["isr"]) == [1, 2, 3]
    for b in c.brokers.values():
        md = topic_md(c, "t3", b.bootstrap)
        parts = md.topics["t3"].partitions
        assert len(parts) == 3
        for p, pm in parts.items():
            assert pm.leader == tz["partitions"][str(p)][0]
            assert sorted(pm.replicas) == [1, 2, 3]
    # more replicas than live brokers
    a = admin(c)
    fs = a.create_topics([NewTopic("t4", 1, 4)], request_timeout=15)
    with pytest.raises(Exception) as e:
        fs["t4"].result(15)
    assert "INVALID_REPLICATION_FACTOR" in str(e.value) or "replication factor" in str(e.value).lower()


def test_auto_create_uses_default_replication_factor(cluster):
    c = cluster(3, overrides={"default.replication.factor": 3, "num.partitions": 2})
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "1"})
    p.produce("autotopic", b"v")
    assert p.flush(30) == 0
    tz = json.loads(c.zk_client().get("/brokers/topics/autotopic")[0])
    assert len(tz["partitions"]) == 2
    assert all(len(r) == 3 for r in tz["partitions"].values())


def test_offsets_topic_waits_for_enough_brokers(cluster):
    c = cluster(2)          # offsets.topic.replication.factor defaults to 3
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "g1",
                     "auto.offset.reset": "earliest"})
    try:
        cons.subscribe(["x"])
        cons.poll(3)
    finally:
        cons.close()
    assert not c.zk_client().exists("/brokers/topics/__consumer_offsets")
    c.add(3)
    c.start(3)
    c.wait_for(lambda: c.live_ids() == [1, 2, 3], 20, "third broker")
    create_topic(c, "grp", partitions=1, rf=3)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "1"})
    for i in range(3):
        p.produce("grp", b"m%d" % i, partition=0)
    assert p.flush(30) == 0
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "g2",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got = []
    try:
        cons.subscribe(["grp"])
        deadline = time.monotonic() + 40
        while len(got) < 3 and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        cons.commit(asynchronous=False)
    finally:
        cons.close()
    assert got == [b"m0", b"m1", b"m2"]
    tz = json.loads(c.zk_client().get("/brokers/topics/__consumer_offsets")[0])
    assert len(tz["partitions"]) == 3 and all(len(r) == 3 for r in tz["partitions"].values())


def test_controller_requests_reach_brokers_and_stale_epochs_are_refused(cluster):
    import asyncio
    from workers.kafka_client import KafkaConnection
    c = cluster(3)
    create_topic(c, "ctl", partitions=1, rf=3)
    cid, epoch = c.controller()
    other = next(i for i in c.brokers if i != cid)
    b = c.brokers[other]
    # the active controller told the other brokers over the Kafka protocol
    c.wait_for(lambda: f"LeaderAndIsr v5 from controller {cid} (epoch {epoch})" in b.log_text()
               and f"UpdateMetadata v7 from controller {cid} (epoch {epoch})" in b.log_text(),
               15, "LeaderAndIsr and UpdateMetadata received")
    zk = c.zk_client()
    broker_epoch = zk.get(f"/brokers/ids/{other}")[1].czxid
    tid = __import__("mpbroker.metadata.model", fromlist=["x"]).uuid_from_str(
        json.loads(zk.get("/brokers/topics/ctl")[0])["topic_id"])
    st = c.state("ctl", 0)

    def lai(controller_epoch, bepoch):
        return {"controller_id": cid, "controller_epoch": controller_epoch, "broker_epoch": bepoch,
                "type": 0, "topic_states": [{"topic_name": "ctl", "topic_id": tid, "partition_states": [
                    {"partition_index": 0, "controller_epoch": controller_epoch, "leader": st["leader"],
                     "leader_epoch": st["leader_epoch"], "isr": st["isr"], "partition_epoch": st["zk_version"],
                     "replicas": st["isr"], "adding_replicas": [], "removing_replicas": []}]}],
                "live_leaders": []}

    async def main():
        conn = await KafkaConnection.connect("127.0.0.1", b.port, timeout_ms=10000)
        try:
            stale = await conn.request(4, 5, lai(epoch - 1, -1))
            fenced = await conn.request(4, 5, lai(epoch, broker_epoch - 1))
            ok = await conn.request(4, 5, lai(epoch, broker_epoch))
            stop = await conn.request(5, 3, {"controller_id": cid, "controller_epoch": epoch - 1,
                                             "broker_epoch": -1, "topic_states": [
                {"topic_name": "ctl", "partition_states": [
                    {"partition_index": 0, "leader_epoch": -2, "delete_partition": True}]}]})
            um = await conn.request(6, 7, {"controller_id": cid, "controller_epoch": epoch,
                                           "broker_epoch": -1, "topic_states": [], "live_brokers": []})
            return stale, fenced, ok, stop, um
        finally:
            await conn.close()
    stale, fenced, ok, stop, um = asyncio.run(main())
    assert stale["error_code"] == 11 and stale["topics"][0]["partition_errors"][0]["error_code"] == 11
    assert fenced["error_code"] == 77
    assert ok["error_code"] == 0 and ok["topics"][0]["partition_errors"][0]["error_code"] == 0
    assert stop["error_code"] == 11 and stop["partition_errors"][0]["error_code"] == 11
    assert um["error_code"] == 0
    assert c.state("ctl", 0)["leader"] == st["leader"]      # nothing was stopped or changed
    assert os.path.isdir(b.data_dir / "ctl-0")
