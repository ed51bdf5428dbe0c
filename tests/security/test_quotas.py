"""Client quotas against the real broker with real clients (issue #17, KIP-13/219/546).

A produce and a fetch byte-rate quota set on a client id (the user is ANONYMOUS on a
PLAINTEXT listener) throttle confluent-kafka: the broker reports throttle_time_ms in
its responses (librdkafka's throttle_cb) and the total reported throttle is what the
quota demands of the bytes moved (assertions on broker-reported values and the stored
config, never on wall-clock time). DescribeClientQuotas sees what AlterClientQuotas
set, also after a restart, through `mpbroker quotas` too.

The quota window is shortened (quota.window.num=3) so that a burst is throttled after
a few hundred kilobytes: the rate is measured over at least (num - 1) windows.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from tests.cluster.conftest import cluster, zookeeper  # noqa: F401  (fixtures, ZooKeeper mode)
from tests.integration import broker as harness
from tests.integration.broker import Broker

pytest.importorskip("confluent_kafka")

QUOTA = 50_000                    # bytes/s
WINDOW = {"quota.window.num": "3", "quota.window.size.seconds": "1"}
PADDED_S = 2                      # a fresh rate is measured over (num - 1) windows


@pytest.fixture
def quota_broker(tmp_path, request):
    b = Broker(tmp_path / "b", dict(WINDOW), name="quota-broker")
    b.start()
    yield b
    b.stop(timeout=20) if b.is_alive() else b.kill()


def wire(b: Broker, api_key: int, body: dict) -> dict:
    from workers.kafka_client import KafkaConnection

    async def call():
        conn = await KafkaConnection.connect(b.host, b.port, client_id="quota-test",
                                             timeout_ms=10000)
        try:
            return await conn.request(api_key, 1, body)
        finally:
            await conn.close()
    return asyncio.run(call())


def alter(b: Broker, entity: list, ops: dict, remove=()) -> dict:
    body = {"validate_only": False, "entries": [{
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
        "ops": [{"key": k, "value": float(v), "remove": False} for k, v in ops.items()]
        + [{"key": k, "value": 0.0, "remove": True} for k in remove]}]}
    resp = wire(b, 49, body)
    assert [e["error_code"] for e in resp["entries"]] == [0], resp
    return resp


def describe(b: Broker, components=(), strict=False) -> dict:
    resp = wire(b, 48, {"components": [{"entity_type": t, "match_type": m, "match": n}
                                       for t, m, n in components], "strict": strict})
    assert resp["error_code"] == 0, resp
    return {tuple((e["entity_type"], e["entity_name"]) for e in r["entity"]):
            {v["key"]: v["value"] for v in r["values"]} for r in resp["entries"]}


def cli(b: Broker, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.main", "quotas", *args,
                           "--bootstrap-server", b.bootstrap], capture_output=True, text=True,
                          timeout=60, cwd=str(harness.REPO_ROOT))


def throttled_total_ms(events) -> float:
    return sum(e * 1000 for e in events)


def test_produce_quota_throttles_and_holds_the_rate(quota_broker):
    b = quota_broker
    topic = harness.create_topic(b.bootstrap, "produce-quota", 1)
    alter(b, [("client-id", "quota-producer")], {"producer_byte_rate": QUOTA})
    assert describe(b)[(("client-id", "quota-producer"),)] == {"producer_byte_rate": QUOTA}
    events = []
    p = harness.producer(b.bootstrap, **{"client.id": "quota-producer", "linger.ms": 20,
                                         "throttle_cb": lambda e: events.append(e.throttle_time)})
    payload = b"x" * 1000
    total = 0
    for _ in range(300):                      # 300 kB: six times the quota's 2 s window
        p.produce(topic, payload)
        total += len(payload)
        p.poll(0)
    assert p.flush(60) == 0
    p.poll(0.5)
    assert events and max(events) > 0, "no throttle_time_ms reported by the broker"
    # the bytes beyond what the quota allows over the padded window must have been paid
    # for in throttle time: loose (responses pipelined, librdkafka may merge events)
    owed_ms = (total / QUOTA - PADDED_S) * 1000
    assert throttled_total_ms(events) >= 0.3 * owed_ms
    assert max(events) * 1000 <= 3 * 1000 + 1    # capped at one quota window
    # another client id is not throttled
    other = []
    p2 = harness.producer(b.bootstrap, **{"client.id": "free-producer",
                                          "throttle_cb": lambda e: other.append(e.throttle_time)})
    for _ in range(50):
        p2.produce(topic, payload)
    assert p2.flush(30) == 0
    p2.poll(0.2)
    assert not any(other)


def test_fetch_quota_throttles_the_consumer(quota_broker):
    b = quota_broker
    topic = harness.create_topic(b.bootstrap, "fetch-quota", 1)
    p = harness.producer(b.bootstrap)
    n, size = 250, 1000
    for _ in range(n):
        p.produce(topic, b"y" * size)
    assert p.flush(30) == 0
    alter(b, [("client-id", "quota-consumer")], {"consumer_byte_rate": QUOTA})
    events = []
    c = harness.consumer(b.bootstrap, **{"client.id": "quota-consumer",
                                         "throttle_cb": lambda e: events.append(e.throttle_time)})
    harness.assign_from_beginning(c, topic, 1)
    got = len(harness.consume(c, n, timeout=60))
    c.poll(0.2)
    c.close()
    assert got == n
    assert events and max(events) > 0, "no fetch throttle reported"
    owed_ms = (n * size / QUOTA - PADDED_S) * 1000
    assert throttled_total_ms(events) >= 0.3 * owed_ms


def test_quotas_survive_a_restart_and_the_cli_manages_them(quota_broker):
    b = quota_broker
    r = cli(b, "alter", "--entity-type", "users", "--entity-default",
            "--add-config", "consumer_byte_rate=2048,request_percentage=50")
    assert r.returncode == 0, r.stderr
    r = cli(b, "alter", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-name", "app",
            "--add-config", "producer_byte_rate=1024")
    assert r.returncode == 0, r.stderr
    r = cli(b, "alter", "--entity-type", "clients", "--entity-name", "x",
            "--add-config", "no_such_quota=1")
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr
    b.restart()
    r = cli(b, "describe", "--json")
    assert r.returncode == 0, r.stderr
    entries = json.loads(r.stdout)["entries"]
    assert {"entity": {"user": None}, "quotas": {"consumer_byte_rate": 2048.0,
                                                 "request_percentage": 50.0}} in entries
    assert {"entity": {"user": "alice", "client-id": "app"},
            "quotas": {"producer_byte_rate": 1024.0}} in entries
    r = cli(b, "describe", "--entity-type", "users", "--entity-default")
    assert r.returncode == 0 and "the default user-principal" in r.stdout
    r = cli(b, "alter", "--entity-type", "users", "--entity-default",
            "--delete-config", "consumer_byte_rate,request_percentage")
    assert r.returncode == 0, r.stderr
    assert (("user", None),) not in describe(b)


def test_zookeeper_quota_set_through_one_broker_applies_on_another(cluster):
    from confluent_kafka import Producer
    from tests.cluster.test_failover import create_topic, leaders_seen_by
    c = cluster(2, overrides=WINDOW)
    one, two = c.brokers[1], c.brokers[2]
    alter(one, [("client-id", "zk-producer")], {"producer_byte_rate": QUOTA})
    zk = c.zk_client()
    assert json.loads(zk.get("/config/clients/zk-producer")[0]) == {
        "version": 1, "config": {"producer_byte_rate": str(QUOTA)}}
    changes = zk.get_children("/config/changes")
    assert any(json.loads(zk.get(f"/config/changes/{n}")[0])["entity_path"] == "clients/zk-producer"
               for n in changes)
    c.wait_for(lambda: (("client-id", "zk-producer"),) in describe(two), 15,
               "the quota seen by broker 2")
    create_topic(c, "zk-quota", partitions=2, rf=1)   # one partition led by each broker
    c.wait_for(lambda: sorted(leaders_seen_by(c, two.bootstrap, "zk-quota").values()) == [1, 2],
               15, "zk-quota's leaders")
    part = next(p for p, leader in leaders_seen_by(c, two.bootstrap, "zk-quota").items()
                if leader == 2)
    events = []
    p = Producer({"bootstrap.servers": two.bootstrap, "client.id": "zk-producer", "linger.ms": 20,
                  "throttle_cb": lambda e: events.append(e.throttle_time)})
    for _ in range(300):      # each of broker 2's 2 workers allows QUOTA / 2
        p.produce("zk-quota", b"z" * 1000, partition=part)
        p.poll(0)
    assert p.flush(60) == 0
    p.poll(0.5)
    assert events and max(events) > 0
