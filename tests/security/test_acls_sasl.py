"""ACLs with two SASL PLAIN users (issue #17): alice is allowed, bob is denied, on the
same broker at the same time. Needs the SASL listener (workers/handlers/sasl_handshake,
written in parallel): skipped until it is there."""
from __future__ import annotations

import importlib.util
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.integration import broker as harness
from tests.integration.broker import Broker
from tests.security.acl_helpers import AUTHORIZER, binding

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(importlib.util.find_spec("workers.handlers.sasl_handshake") is None,
                                 reason="SASL is not in this tree yet")]

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" '
        'user_bob="bob-secret";')


def sasl(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


@pytest.fixture
def sasl_broker(tmp_path):
    b = Broker(tmp_path / "b", name="sasl-acl-broker")
    listener = f"SASL_PLAINTEXT://127.0.0.1:{b.port}"
    b.overrides.update({
        "listeners": listener, "advertised.listeners": listener,
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER, "super.users": "User:admin"})
    b.start()
    yield b
    b.stop(timeout=20)


def test_alice_allowed_bob_denied(sasl_broker):
    bs = sasl_broker.bootstrap
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    a = harness.admin(bs, **sasl("admin"))
    a.create_topics([harness_new_topic(topic)])[topic].result(30)
    for f in a.create_acls([binding("TOPIC", "orders-", "ALL", principal="User:alice",
                                    pattern="PREFIXED"),
                            binding("GROUP", "alice-", "READ", principal="User:alice",
                                    pattern="PREFIXED")]).values():
        f.result(30)
    results = {}
    for user in ("alice", "bob"):
        p = harness.producer(bs, **sasl(user), **{"message.timeout.ms": 10000})
        errs = []
        p.produce(topic, b"v", on_delivery=lambda err, msg, errs=errs: errs.append(err))
        p.flush(20)
        results[user] = errs[0] if errs else "no report"
    assert results["alice"] is None
    assert results["bob"] is not None and results["bob"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # bob sees no topic and may not touch ACLs
    assert topic not in harness.admin(bs, **sasl("bob")).list_topics(timeout=10).topics
    bob = harness.admin(bs, **sasl("bob"))
    with pytest.raises(KafkaException) as e:
        for f in bob.create_acls([binding("TOPIC", topic, "READ", principal="User:bob")]).values():
            f.result(30)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # alice consumes in her group
    from confluent_kafka import Consumer
    c = Consumer({**harness.common_conf(bs), **sasl("alice"), "group.id": "alice-g",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    assert harness.consume(c, 1)[0].value() == b"v"
    c.close()


def harness_new_topic(name):
    from confluent_kafka.admin import NewTopic
    return NewTopic(name, 1, 1)
