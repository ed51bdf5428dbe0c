"""Checkpoints, group offset sync and heartbeats of one flow A->B (MM2's
MirrorCheckpointConnector and MirrorHeartbeatConnector), driven by `tick(now)`.

* Offset syncs are read from the flow's offset-syncs topic (mm2-offset-syncs.B.internal
  on A by default; from the beginning, without a group) into an `OffsetSyncStore`.
* Every refresh.groups.interval.seconds: the source's consumer groups that match
  `groups` / `groups.exclude` (never the mirror's own `mm2-*` groups).
* Every emit.checkpoints.interval.seconds: each group's committed source offsets on
  replicated topics, translated; a checkpoint (group, remote topic, partition, upstream,
  downstream) per translated offset to A.checkpoints.internal on B. With
  sync.group.offsets.enabled, the translated offsets are also committed to the same
  group on B (AlterConsumerGroupOffsets) when that group has no active member there and
  only where they move the group forward, so a group that failed over to B resumes
  there having re-read at most the records between two offset syncs.
* Every emit.heartbeats.interval.seconds: a heartbeat (A, B, now) to `heartbeats` on B.

Which processes run it: worker 0 of every `mpbroker mirror` process. Several processes
write the same checkpoints (same syncs, same group offsets): compacted topics keep the
last, and the group sync only moves forward, so duplicates are harmless.
"""
from __future__ import annotations

import logging
import time
from typing import Dict, List, Optional

from confluent_kafka import (OFFSET_BEGINNING, ConsumerGroupState, ConsumerGroupTopicPartitions,
                             KafkaException, TopicPartition)

from mpbroker.mirror.config import FlowConfig
from mpbroker.mirror.offset_sync import OffsetSyncStore
from mpbroker.mirror.records import Checkpoint, Heartbeat, OffsetSync

TIMEOUT_S = 15.0
ACTIVE = {ConsumerGroupState.STABLE, ConsumerGroupState.PREPARING_REBALANCING,
          ConsumerGroupState.COMPLETING_REBALANCING}


class CheckpointEmitter:
    def __init__(self, flow: FlowConfig, syncs_reader, source_admin, target_admin, producer,
                 log: logging.Logger, clock=time.monotonic):
        self.flow = flow
        self.reader = syncs_reader
        self.source_admin = source_admin
        self.target_admin = target_admin
        self.producer = producer                        # on the target
        self.log = log
        self.clock = clock
        self.store = OffsetSyncStore()
        p = flow.policy
        self.syncs_topic = flow.offset_syncs_topic
        self.checkpoints_topic = p.checkpoints_topic(flow.source)
        self.heartbeats_topic = p.heartbeats_topic()
        self.groups: List[str] = []
        self._next = {"groups": 0.0, "checkpoints": 0.0, "heartbeats": 0.0}
        self._reading = False
        self.last_checkpoints: Dict[str, Dict[tuple, Checkpoint]] = {}

    def _due(self, what: str, now: float, interval_s: float) -> bool:
        if now < self._next[what]:
            return False
        self._next[what] = now + max(0.1, interval_s)
        return True

    def tick(self) -> None:
        now = self.clock()
        self.read_syncs()
        f = self.flow
        if f["emit.heartbeats.enabled"] and self._due("heartbeats", now,
                                                      f["emit.heartbeats.interval.seconds"]):
            hb = Heartbeat(f.source, f.target, int(time.time() * 1000))
            self.producer.produce(self.heartbeats_topic, key=hb.key(), value=hb.value())
        if f["refresh.groups.enabled"] and self._due("groups", now,
                                                     f["refresh.groups.interval.seconds"]):
            self.groups = self.list_groups()
        if f["emit.checkpoints.enabled"] and self._due("checkpoints", now,
                                                       f["emit.checkpoints.interval.seconds"]):
            self.checkpoint_all()
        self.producer.poll(0)

    def read_syncs(self, max_records: int = 10000) -> int:
        if not self._reading:
            self.reader.assign([TopicPartition(self.syncs_topic, 0, OFFSET_BEGINNING)])
            self._reading = True
        n = 0
        for m in self.reader.consume(max_records, timeout=0):
            if m.error() is not None or m.key() is None or m.value() is None:
                continue
            s = OffsetSync.decode(m.key(), m.value())
            self.store.add((s.topic, s.partition), s.upstream, s.downstream)
            n += 1
        return n

    def list_groups(self) -> List[str]:
        res = self.source_admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        return sorted(g.group_id for g in res.valid if self.flow.replicates_group(g.group_id))

    def checkpoint_all(self) -> None:
        if not self.groups:
            return
        active = self._active_on_target(self.groups) if self.flow["sync.group.offsets.enabled"] \
            else set()
        for group in self.groups:
            try:
                cps = self.checkpoints(group)
            except KafkaException as e:
                self.log.warning("cannot read the offsets of group %s on %s: %s", group,
                                 self.flow.source, e.args[0].str())
                continue
            for cp in cps:
                self.producer.produce(self.checkpoints_topic, key=cp.key(), value=cp.value())
            self.last_checkpoints[group] = {(c.topic, c.partition): c for c in cps}
            if cps and self.flow["sync.group.offsets.enabled"] and group not in active:
                self.sync_group(group, cps)
        self.producer.flush(TIMEOUT_S)

    def checkpoints(self, group: str) -> List[Checkpoint]:
        fut = self.source_admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S)[group]
        out = []
        for tp in fut.result(TIMEOUT_S).topic_partitions:
            if tp.error is not None or tp.offset < 0 or not self.flow.replicates_topic(tp.topic):
                continue
            down = self.store.translate((tp.topic, tp.partition), tp.offset)
            if down is not None:
                remote = self.flow.policy.format_remote_topic(self.flow.source, tp.topic)
                out.append(Checkpoint(group, remote, tp.partition, tp.offset, down,
                                      tp.metadata or ""))
        return out

    def _active_on_target(self, groups: List[str]) -> set:
        active = set()
        try:
            res = self.target_admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        except KafkaException as e:
            self.log.warning("cannot list the groups on %s: %s", self.flow.target, e.args[0].str())
            return set(groups)                          # unknown: do not touch any
        for g in res.valid:
            if g.group_id in groups and g.state in ACTIVE:
                active.add(g.group_id)
        return active

    def sync_group(self, group: str, cps: List[Checkpoint]) -> None:
        """Commit translated offsets to `group` on the target where they move it forward."""
        try:
            fut = self.target_admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S)[group]
            have = {(tp.topic, tp.partition): tp.offset
                    for tp in fut.result(TIMEOUT_S).topic_partitions}
        except KafkaException:
            have = {}
        ahead = [TopicPartition(c.topic, c.partition, c.downstream) for c in cps
                 if have.get((c.topic, c.partition), -1) < c.downstream]
        if not ahead:
            return
        try:
            self.target_admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, ahead)],
                request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
            self.log.info("group %s on %s: offsets synced for %d partitions", group,
                          self.flow.target, len(ahead))
        except KafkaException as e:
            self.log.warning("cannot sync the offsets of group %s on %s: %s", group,
                             self.flow.target, e.args[0].str())

    def translate(self, topic: str, partition: int, upstream: int) -> Optional[int]:
        return self.store.translate((topic, partition), upstream)
