"""Topic sync of one flow: which source topics it replicates, and their remote topics on
the target, created with the source's partition count and (sync.topic.configs.enabled)
its topic-level configs, grown when the source grows (MirrorSourceConnector's refresh).

`TopicSync.refresh()` runs at start and every refresh.topics.interval.seconds;
`ensure()` also runs when the pipeline is assigned a partition the target does not have
yet, so a partition added at the source is followed at the next rebalance or metadata
refresh, not only at the next topic refresh. Configs are copied when the remote topic is
created and, every sync.topic.configs.interval.seconds, altered where they differ.
A topic that cannot be created or grown is reported once per refresh and retried at the
next one; the pipeline holds its partitions meanwhile.

Only the AdminClient talks to the clusters (CreateTopics, CreatePartitions,
DescribeConfigs, IncrementalAlterConfigs, Metadata).
"""
from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Optional

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewPartitions, NewTopic)

from mpbroker.mirror.config import FlowConfig

TIMEOUT_S = 15.0


def partition_counts(admin: AdminClient, timeout: float = TIMEOUT_S) -> Dict[str, int]:
    """Every topic of the cluster with its partition count (Metadata)."""
    md = admin.list_topics(timeout=timeout)
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def _result(fut) -> Optional[KafkaError]:
    try:
        fut.result(TIMEOUT_S)
        return None
    except KafkaException as e:
        return e.args[0]


class TopicSync:
    def __init__(self, flow: FlowConfig, source: AdminClient, target: AdminClient,
                 log: logging.Logger):
        self.flow = flow
        self.source = source
        self.target = target
        self.log = log
        self.target_partitions: Dict[str, int] = {}     # remote topic -> partitions seen

    def remote(self, topic: str) -> str:
        return self.flow.policy.format_remote_topic(self.flow.source, topic)

    def source_topics(self) -> Dict[str, int]:
        """The source topics this flow replicates, with their partition counts."""
        return {t: n for t, n in partition_counts(self.source).items()
                if self.flow.replicates_topic(t)}

    def refresh(self, sync_configs: bool = False) -> Dict[str, int]:
        """Create or grow every remote topic; returns the replicated source topics."""
        topics = self.source_topics()
        self.ensure(topics)
        if sync_configs and self.flow["sync.topic.configs.enabled"]:
            self._alter_configs([t for t in topics if self.remote(t) in self.target_partitions])
        return topics

    def ensure(self, topics: Dict[str, int]) -> List[str]:
        """Create missing remote topics and add missing partitions; returns the source
        topics whose remote topic now has at least the source's partitions."""
        have = partition_counts(self.target)
        create = {t: n for t, n in topics.items() if self.remote(t) not in have}
        grow = {t: n for t, n in topics.items()
                if self.remote(t) in have and have[self.remote(t)] < n}
        failed = set()
        if create:
            configs = self._source_configs(list(create)) \
                if self.flow["sync.topic.configs.enabled"] else {}
            futs = self.target.create_topics(
                [NewTopic(self.remote(t), n, self.flow["replication.factor"],
                          config=configs.get(t, {})) for t, n in create.items()],
                operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
            for t, n in create.items():
                err = _result(futs[self.remote(t)])
                if err is None or err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    self.log.info("created %s on %s (%d partitions) for %s", self.remote(t),
                                  self.flow.target, n, t)
                    have[self.remote(t)] = max(n, have.get(self.remote(t), 0))
                else:
                    failed.add(t)
                    self.log.warning("cannot create topic %s on %s: %s (retried at the next "
                                     "refresh)", self.remote(t), self.flow.target, err.str())
        if grow:
            futs = self.target.create_partitions(
                [NewPartitions(self.remote(t), n) for t, n in grow.items()],
                operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
            for t, n in grow.items():
                err = _result(futs[self.remote(t)])
                if err is None or err.code() == KafkaError.INVALID_PARTITIONS:
                    self.log.info("%s on %s now has %d partitions, as %s", self.remote(t),
                                  self.flow.target, n, t)
                    have[self.remote(t)] = n
                else:
                    failed.add(t)
                    self.log.warning("cannot add partitions to %s on %s: %s (retried at the "
                                     "next refresh)", self.remote(t), self.flow.target, err.str())
        for t in topics:
            if t not in failed and self.remote(t) in have:
                self.target_partitions[self.remote(t)] = have[self.remote(t)]
        return [t for t in topics if t not in failed and have.get(self.remote(t), 0) >= topics[t]]

    def _source_configs(self, topics: Iterable[str]) -> Dict[str, Dict[str, str]]:
        """Topic configs set on the source (not defaults) that the flow copies."""
        topics = list(topics)
        if not topics:
            return {}
        futs = self.source.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t)
                                             for t in topics], request_timeout=TIMEOUT_S)
        out: Dict[str, Dict[str, str]] = {}
        for res, fut in futs.items():
            try:
                entries = fut.result(TIMEOUT_S)
            except KafkaException as e:
                self.log.warning("cannot read the configs of %s on %s: %s", res.name,
                                 self.flow.source, e.args[0].str())
                continue
            out[res.name] = {
                name: e.value for name, e in entries.items()
                if getattr(e.source, "value", e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                and e.value is not None
                and not e.is_sensitive and self.flow.syncs_config(name)}
        return out

    def _alter_configs(self, topics: List[str]) -> None:
        wanted = self._source_configs(topics)
        if not wanted:
            return
        current = {}
        futs = self.target.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, self.remote(t)) for t in wanted],
            request_timeout=TIMEOUT_S)
        for res, fut in futs.items():
            try:
                current[res.name] = {n: e.value for n, e in fut.result(TIMEOUT_S).items()}
            except KafkaException:
                continue
        changes = []
        for t, conf in wanted.items():
            have = current.get(self.remote(t))
            diff = {k: v for k, v in conf.items() if have is not None and have.get(k) != v}
            if diff:
                changes.append(ConfigResource(
                    ConfigResource.Type.TOPIC, self.remote(t), incremental_configs=[
                        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                        for k, v in diff.items()]))
        if not changes:
            return
        for res, fut in self.target.incremental_alter_configs(changes).items():
            err = _result(fut)
            if err is not None:
                self.log.warning("cannot sync the configs of %s on %s: %s", res.name,
                                 self.flow.target, err.str())

    def ensure_internal(self, names_partitions_rf: Dict[str, tuple], admin: AdminClient,
                        cluster: str) -> bool:
        """MM2's internal topics ({name: (partitions, replication factor, compacted)})
        on `cluster`; False if one is missing and could not be created."""
        have = partition_counts(admin)
        missing = {n: v for n, v in names_partitions_rf.items() if n not in have}
        if not missing:
            return True
        futs = admin.create_topics(
            [NewTopic(n, p, rf, config={"cleanup.policy": "compact"} if compact else {})
             for n, (p, rf, compact) in missing.items()],
            operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
        ok = True
        for n in missing:
            err = _result(futs[n])
            if err is not None and err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                ok = False
                self.log.warning("cannot create internal topic %s on %s: %s (retried)", n,
                                 cluster, err.str())
        return ok
