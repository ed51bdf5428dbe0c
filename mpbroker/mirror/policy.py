"""Replication policies: how a topic is named on the target, and how a name tells where
it came from (Kafka's `ReplicationPolicy`, selected by `replication.policy.class`).

* `DefaultReplicationPolicy`: topic `t` of cluster `A` is `A.t` on the target (the
  separator is `replication.policy.separator`). A name carries its path, `B.A.t`, so a
  flow never replicates a topic whose path already holds its target: A->B plus B->A
  does not loop.
* `IdentityReplicationPolicy`: the same name on the target (except heartbeats, which
  keep the prefix). It cannot tell a remote topic from a local one, so it cannot detect
  cycles: use it for one-way flows (migration, DR) only, as with Kafka.

Internal topics (never replicated): `__*`, `.*`, `*.internal`, `*-internal` (Kafka's
and Connect's), MM2's own `mm2-*.internal` and `<alias>.checkpoints.internal`.
"""
from __future__ import annotations

from typing import Optional

HEARTBEATS = "heartbeats"


class DefaultReplicationPolicy:
    def __init__(self, separator: str = "."):
        self.sep = separator

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.sep}{topic}"

    def topic_source(self, topic: str) -> Optional[str]:
        """The alias of the cluster `topic` was replicated from, None for a local topic."""
        i = topic.find(self.sep)
        return None if i < 0 else topic[:i]

    def upstream_topic(self, topic: str) -> Optional[str]:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.sep):]

    def original_topic(self, topic: str) -> str:
        up = self.upstream_topic(topic)
        return topic if up is None or up == topic else self.original_topic(up)

    # -- MM2's internal topics
    def offset_syncs_topic(self, alias: str) -> str:
        return f"mm2-offset-syncs{self.sep}{alias}{self.sep}internal"

    def checkpoints_topic(self, alias: str) -> str:
        return f"{alias}{self.sep}checkpoints{self.sep}internal"

    def heartbeats_topic(self) -> str:
        return HEARTBEATS

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == HEARTBEATS

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(f"{self.sep}checkpoints{self.sep}internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return (topic.startswith("mm2") and topic.endswith(f"{self.sep}internal")) \
            or self.is_checkpoints_topic(topic)

    def is_internal_topic(self, topic: str) -> bool:
        return self.is_mm2_internal_topic(topic) or topic.startswith(("__", ".")) \
            or topic.endswith(("-internal", ".internal"))

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """True when `topic`'s path of clusters already contains `target_alias`."""
        source = self.topic_source(topic)
        if source is None:
            return False
        if source == target_alias:
            return True
        up = self.upstream_topic(topic)
        return False if up is None or up == topic else self.is_cycle(up, target_alias)


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    def _heartbeat_like(self, topic: str) -> bool:
        return topic.endswith(HEARTBEATS)

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._heartbeat_like(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> Optional[str]:
        return super().topic_source(topic) if self._heartbeat_like(topic) else None

    def upstream_topic(self, topic: str) -> Optional[str]:
        return super().upstream_topic(topic) if self._heartbeat_like(topic) else topic


ReplicationPolicy = DefaultReplicationPolicy

# replication.policy.class values: Kafka's class names, and the short names.
POLICIES = {
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy": DefaultReplicationPolicy,
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": IdentityReplicationPolicy,
    "DefaultReplicationPolicy": DefaultReplicationPolicy,
    "IdentityReplicationPolicy": IdentityReplicationPolicy,
}
