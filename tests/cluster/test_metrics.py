"""Metrics in cluster mode (real ZooKeeper, three real brokers, each with its own
`metrics.listener`): one active controller among them, and a follower killed and
restarted shows as an ISR shrink, an under-replicated partition, then an ISR expansion."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.broker import free_port
from tests.integration.test_metrics import scrape, value

pytestmark = pytest.mark.slow


def test_isr_shrink_and_expand_and_one_active_controller(cluster):
    c = cluster(3, {"replica.lag.time.max.ms": 2000}, start=False)
    ports = {}
    for i, b in c.brokers.items():
        ports[i] = free_port()
        b.overrides["metrics.listener"] = f"http://127.0.0.1:{ports[i]}"
    c.start_all()
    topic = "metrics-isr"
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30,
                    request_timeout=30)[topic].result(30)
    c.wait_for(lambda: (c.state(topic, 0) or {}).get("isr") and len(c.state(topic, 0)["isr"]) == 3,
               30, "the ISR of 3")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(30) == 0

    def total(name, brokers=None):
        return sum(value(scrape(ports[i]), name) for i in (brokers or c.brokers))

    c.wait_for(lambda: total("kafka_controller_kafkacontroller_activecontrollercount") == 1,
               30, "one active controller")
    leader = c.state(topic, 0)["leader"]
    assert value(scrape(ports[leader]), "kafka_server_brokertopicmetrics_messagesin_total",
                 topic=topic) == 10
    controller_id, _ = c.controller()
    victim = next(i for i in c.brokers if i not in (leader, controller_id))
    alive = [i for i in c.brokers if i != victim]
    c.kill(victim)
    c.wait_for(lambda: total("kafka_server_replicamanager_isrshrinks_total", alive) >= 1,
               60, "an ISR shrink")
    c.wait_for(lambda: value(scrape(ports[leader]),
                             "kafka_server_replicamanager_underreplicatedpartitions") == 1,
               30, "the partition under-replicated on its leader")
    assert total("kafka_controller_kafkacontroller_offlinepartitionscount", alive) == 0
    c.start(victim)
    c.wait_for(lambda: total("kafka_server_replicamanager_isrexpands_total", alive) >= 1,
               90, "an ISR expansion")
    c.wait_for(lambda: total("kafka_server_replicamanager_underreplicatedpartitions") == 0,
               30, "no under-replicated partition")
    assert total("kafka_controller_kafkacontroller_activecontrollercount") == 1
