"""The `mpbroker.testing` pytest plugin, used the way a user's project uses it: a
confluent-kafka round trip through `mpbroker_broker`, a private broker with overrides
from `mpbroker_factory`, and the plugin loaded by a separate pytest run with `-p`."""
from __future__ import annotations

import uuid

import pytest

pytest_plugins = ["mpbroker.testing", "pytester"]

pytestmark = pytest.mark.integration


def test_session_broker_round_trip_with_confluent_kafka(mpbroker_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic = f"plugin-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": mpbroker_broker})
    for i in range(3):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": mpbroker_broker, "group.id": "plugin", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append((m.key(), m.value()))
            if len(got) == 3:
                break
        assert got == [(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")]
    finally:
        c.close()


def test_factory_broker_takes_overrides_and_restarts(mpbroker_factory):
    from confluent_kafka.admin import AdminClient
    b = mpbroker_factory({"num.partitions": 3})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("auto-created", value=b"x")
    assert p.flush(30) == 0
    assert len(admin.list_topics("auto-created", timeout=10).topics["auto-created"].partitions) == 3
    assert b.stop() == 0 and not b.is_alive()
    b.start()
    assert "auto-created" in admin.list_topics(timeout=10).topics


def test_plugin_loads_with_dash_p(pytester):
    pytester.makepyfile(test_user="""
        def test_it(mpbroker_broker, mpbroker_factory):
            host, port = mpbroker_broker.rsplit(":", 1)
            assert host == "127.0.0.1" and int(port) > 0
    """)
    result = pytester.runpytest_subprocess("-p", "mpbroker.testing", "-p", "no:locust", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_free_port_never_hands_out_a_port_twice():
    from mpbroker.testing import free_port
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
