"""loadtest/peers.py's topic helpers against a real broker: a bench's topic is really
gone after `delete_topic` (a temporary AdminClient used to be destroyed before its
delete finished, and the topics stayed), and a failed delete is an error, not silence."""
from __future__ import annotations

import uuid

import pytest

from loadtest.peers import create_topic, delete_topic

pytestmark = pytest.mark.integration


def test_delete_topic_waits_until_the_topic_is_gone(loadtest_broker):
    from confluent_kafka.admin import AdminClient
    name = f"peers-{uuid.uuid4().hex[:8]}"
    create_topic(loadtest_broker.bootstrap, name, partitions=2)
    admin = AdminClient({"bootstrap.servers": loadtest_broker.bootstrap})
    assert name in admin.list_topics(timeout=10).topics
    delete_topic(loadtest_broker.bootstrap, name)
    assert name not in admin.list_topics(timeout=10).topics
    if not loadtest_broker.external:
        assert not (loadtest_broker.data_dir / f"{name}-0").exists()


def test_delete_of_a_missing_topic_raises(loadtest_broker):
    from confluent_kafka import KafkaError, KafkaException
    with pytest.raises(KafkaException) as e:
        delete_topic(loadtest_broker.bootstrap, f"never-made-{uuid.uuid4().hex[:8]}", timeout_s=10)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
