"""Replication policies: Kafka's naming and cycle rules."""
from __future__ import annotations

from mpbroker.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy


def test_default_policy_names_and_paths():
    p = DefaultReplicationPolicy()
    assert p.format_remote_topic("A", "orders") == "A.orders"
    assert p.topic_source("B.A.orders") == "B"
    assert p.upstream_topic("B.A.orders") == "A.orders"
    assert p.original_topic("B.A.orders") == "orders"
    assert p.topic_source("orders") is None and p.upstream_topic("orders") is None


def test_default_policy_internal_topics():
    p = DefaultReplicationPolicy()
    assert p.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert p.checkpoints_topic("A") == "A.checkpoints.internal"
    for t in ("__consumer_offsets", ".hidden", "mm2-offset-syncs.B.internal",
              "A.checkpoints.internal", "mm2-configs.A.internal", "connect-offsets-internal"):
        assert p.is_internal_topic(t), t
    assert not p.is_internal_topic("orders") and not p.is_internal_topic("A.orders")
    assert p.is_heartbeats_topic("heartbeats") and p.is_heartbeats_topic("A.heartbeats")


def test_cycles_are_detected_along_the_path():
    p = DefaultReplicationPolicy()
    assert p.is_cycle("B.orders", "B")
    assert p.is_cycle("A.B.orders", "B")
    assert not p.is_cycle("C.orders", "B") and not p.is_cycle("orders", "B")


def test_custom_separator():
    p = DefaultReplicationPolicy("__")
    assert p.format_remote_topic("A", "x.y") == "A__x.y"
    assert p.topic_source("A__x.y") == "A"
    assert p.offset_syncs_topic("B") == "mm2-offset-syncs__B__internal"


def test_identity_policy_keeps_names_but_prefixes_heartbeats():
    p = IdentityReplicationPolicy()
    assert p.format_remote_topic("A", "orders") == "orders"
    assert p.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert p.topic_source("orders") is None
    assert not p.is_cycle("orders", "B")          # no path in the name: cannot tell
    assert p.is_cycle("B.heartbeats", "B")
