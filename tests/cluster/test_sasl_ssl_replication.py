"""Replication over a SASL_SSL inter-broker listener (issue #17), real ZooKeeper and two
real brokers: clients use the PLAINTEXT listener, the brokers' own connections (replica
fetchers, the controller's LeaderAndIsr/UpdateMetadata) use the INTERNAL listener
(SASL_SSL, PLAIN, `inter.broker.listener.name=INTERNAL`) and authenticate as
User:broker. acks=all records with min.insync.replicas=2 are acknowledged (the follower
fetched them over TLS) and survive a kill -9 of the leader; Metadata on the PLAINTEXT
listener names the PLAINTEXT endpoints of both brokers."""
from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mpbroker.testing import free_port
from tests.security.certs import KEY_PASSWORD, Certs

pytestmark = [pytest.mark.slow, pytest.mark.integration]

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";')


def test_replication_over_a_sasl_ssl_inter_broker_listener(cluster, tmp_path):
    certs = Certs(tmp_path)
    c = cluster(n=0, start=False)
    for i in (1, 2):
        b = c.add(i, {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": JAAS,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
            "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": certs.ca, "log.requests": "true"})
        internal = free_port()
        b.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},"
                                    f"INTERNAL://127.0.0.1:{internal}")
        b.overrides["advertised.listeners"] = b.overrides["listeners"]
    c.start_all()
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    md = a.list_topics(timeout=30)
    assert sorted((b.host, b.port) for b in md.brokers.values()) == \
        sorted(("127.0.0.1", b.port) for b in c.brokers.values())
    a.create_topics([NewTopic("secure", 1, 2, config={"min.insync.replicas": "2"})])["secure"].result(30)
    c.wait_for(lambda: len((c.state("secure", 0) or {}).get("isr", ())) == 2, 30, "full ISR")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    acked = []
    for i in range(200):
        p.produce("secure", b"r%d" % i, on_delivery=lambda err, m: acked.append(err is None))
    assert p.flush(60) == 0
    assert len(acked) == 200 and all(acked)
    leader = c.state("secure", 0)["leader"]
    follower = 3 - leader
    fetches = re.findall(r"api=Fetch .*client_id=mpbroker-replica-\S+ .*principal=(\S+)",
                         c.brokers[leader].log_path.read_text(errors="replace"))
    assert fetches and set(fetches) == {"User:broker"}
    c.kill(leader)
    cons = Consumer({"bootstrap.servers": c.brokers[follower].bootstrap, "group.id": "check",
                     "enable.auto.commit": False})
    cons.assign([TopicPartition("secure", 0, 0)])
    got = []
    c.wait_for(lambda: got.extend(m.value() for m in cons.consume(200, 1) if not m.error())
               or len(got) >= 200, 60, "every acknowledged record on the survivor")
    cons.close()
    assert got == [b"r%d" % i for i in range(200)]
