"""One flow A->B in one process: the record pipeline (MM2's MirrorSourceTask), its topic
sync and, on the process's worker 0, its checkpoints and heartbeats.

The pipeline is a member of the consumer group `mm2-A->B` on the SOURCE, subscribed to
the replicated topics (explicit names, refreshed every refresh.topics.interval.seconds).
Every process and --workers child that runs the flow joins that group, so the group
protocol of the source cluster assigns the partitions, rebalances them when a member
joins or leaves and hands a dead member's partitions to the others. The assignor is an
eager one (roundrobin; A.consumer.partition.assignment.strategy may change it, except
with exactly-once, where the on_assign callback must see the whole assignment to fence
and position it) because partitions are revoked and committed as a whole before they move.

Loop (one thread, `run()` until `stop` is set):

    consume a batch -> sink.write (target partition = source partition, key, value,
    headers, timestamp) -> seek partitions the sink rewinds -> every
    offset.flush.interval.ms commit -> every refresh: topic sync, resubscribe, resume
    held partitions, topic ACL sync -> every --progress-interval: one log line per topic with the
    records mirrored and the lag (high watermark - position, summed over the assigned
    partitions).

A partition whose remote topic/partition cannot be made on the target is paused
("held") until a refresh succeeds. An unreachable cluster (any KafkaException from the
admin calls) is logged and retried with exponential backoff up to 30 s. On stop the sink
drains (delivers, commits) and the consumer leaves the group.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Dict, List, Optional, Set

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from mpbroker.mirror.acls import AclSync
from mpbroker.mirror.checkpoint import CheckpointEmitter
from mpbroker.mirror.config import FlowConfig, MirrorConfigError
from mpbroker.mirror.sinks import AtLeastOnceSink, OffsetSyncWriter, TransactionalSink
from mpbroker.mirror.topics import TopicSync, partition_counts

BATCH = 1000
# consume() returns when BATCH records are there or after this long: short, so that a
# trickle of records is not held back (the end-to-end lag), long enough not to spin.
POLL_S = 0.05
MAX_BACKOFF_S = 30.0


def make_client(cls, conf: Dict[str, str], what: str):
    """A confluent-kafka client; a bad setting is a configuration error (exit 2)."""
    try:
        return cls(conf)
    except (KafkaException, ValueError, TypeError) as e:
        msg = e.args[0].str() if e.args and isinstance(e.args[0], KafkaError) else str(e)
        raise MirrorConfigError(f"{what}: {msg}")


class FlowTask:
    def __init__(self, flow: FlowConfig, stop: threading.Event, *, member: str,
                 checkpoints: bool = True, progress_interval_s: float = 30.0,
                 log: Optional[logging.Logger] = None):
        self.flow = flow
        self.stop = stop
        self.log = log or logging.getLogger(f"mpbroker.mirror.{flow.name}")
        self.progress_interval_s = progress_interval_s
        f = flow
        refresh_ms = str(max(1000, f["refresh.topics.interval.seconds"] * 1000))
        src_consumer = {"group.id": f.group_id, "enable.auto.commit": "false",
                        "enable.auto.offset.store": "false", "auto.offset.reset": "earliest",
                        "isolation.level": "read_committed",
                        "partition.assignment.strategy": "roundrobin",
                        "topic.metadata.refresh.interval.ms": refresh_ms,
                        "client.id": f"{member}-{f.name}",
                        **f.client(f.source, "consumer")}
        if f.exactly_once:
            src_consumer["partition.assignment.strategy"] = "roundrobin"   # forced: see docstring
        self.consumer = make_client(Consumer, src_consumer, f"{f.source} consumer")
        self.source_admin = make_client(AdminClient, f.client(f.source, "admin"), f"{f.source} admin")
        self.target_admin = make_client(AdminClient, f.client(f.target, "admin"), f"{f.target} admin")
        self.topics = TopicSync(f, self.source_admin, self.target_admin, self.log)
        self.acls = AclSync(f, self.source_admin, self.target_admin, self.topics.remote, self.log)
        syncs_cluster = self.syncs_cluster = f.offset_syncs_cluster
        self.syncs_topic = f.offset_syncs_topic
        self.aux = make_client(Producer, {"linger.ms": "20", "enable.idempotence": "true",
                                          **f.client(syncs_cluster, "producer")},
                               f"{syncs_cluster} producer")
        syncs = OffsetSyncWriter(self.aux if f["emit.offset-syncs.enabled"] else None,
                                 self.syncs_topic, f["offset.lag.max"])
        base_producer = {"enable.idempotence": "true", "acks": "all", "linger.ms": "5",
                         "compression.type": "none", **f.client(f.target, "producer")}
        alo_producer = {"enable.gapless.guarantee": "true", **base_producer}
        remote = self.topics.remote
        if f.exactly_once:
            reader = make_client(Consumer, {"group.id": f.group_id, "enable.auto.commit": "false",
                                            "isolation.level": "read_committed",
                                            **f.client(f.target, "consumer")},
                                 f"{f.target} consumer")
            self.sink = TransactionalSink(
                lambda tid: make_client(Producer, {**base_producer, "transactional.id": tid},
                                        f"{f.target} producer"),
                f.group_id, reader, remote, syncs, self.log)
        else:
            self.sink = AtLeastOnceSink(
                lambda on_error: make_client(Producer, {**alo_producer, "error_cb": on_error},
                                             f"{f.target} producer"),
                remote, syncs, self.log)
        self.checkpointer = None
        if checkpoints and (f["emit.checkpoints.enabled"] or f["emit.heartbeats.enabled"]):
            tgt_producer = make_client(Producer, {"linger.ms": "20", **f.client(f.target, "producer")},
                                       f"{f.target} producer")
            reader = make_client(Consumer, {"group.id": f"{f.group_id}-syncs-reader",
                                            "enable.auto.commit": "false",
                                            **f.client(syncs_cluster, "consumer")},
                                 f"{syncs_cluster} consumer")
            self.checkpointer = CheckpointEmitter(f, reader, self.source_admin, self.target_admin,
                                                  tgt_producer, self.log)
        self.subscribed: List[str] = []
        self.source_counts: Dict[str, int] = {}
        self.assigned: List[TopicPartition] = []
        self.held: Set[tuple] = set()
        self._backoff = 1.0
        self._next_refresh = 0.0
        self._next_configs = 0.0
        self._next_commit = 0.0
        self._next_progress = time.monotonic() + progress_interval_s
        self._internal_ok = False
        self._next_lag = 0.0
        self.lag: Dict[str, int] = {}                   # source topic -> records behind

    # ---------------------------------------------------------------- group callbacks
    def _on_assign(self, consumer, tps: List[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in tps]
        held = set()
        try:
            counts = {t: n for t, n in partition_counts(self.source_admin).items()
                      if t in {k[0] for k in keys}}
            ready = set(self.topics.ensure(counts))
            held = {k for k in keys if k[0] not in ready}
            positions = self.sink.positions(keys)
        except KafkaException as e:
            self.log.warning("on assignment: %s; partitions held until the next refresh",
                             e.args[0].str())
            held, positions = set(keys), {}
        for tp in tps:
            if (tp.topic, tp.partition) in positions:
                tp.offset = positions[(tp.topic, tp.partition)]
        consumer.assign(tps)
        self.assigned = list(tps)
        self.held = held
        if held:
            consumer.pause([TopicPartition(t, p) for t, p in held])
        self.log.info("assigned %d partitions of %s%s", len(tps),
                      ", ".join(sorted({tp.topic for tp in tps})) or "nothing",
                      f" ({len(held)} held: target not ready)" if held else "")

    def _on_revoke(self, consumer, tps: List[TopicPartition]) -> None:
        self.sink.revoke(consumer, [(tp.topic, tp.partition) for tp in tps])
        self.assigned, self.held = [], set()

    def _on_lost(self, consumer, tps: List[TopicPartition]) -> None:
        self.sink.revoke(consumer, [(tp.topic, tp.partition) for tp in tps], commit=False)
        self.assigned, self.held = [], set()

    # ---------------------------------------------------------------- periodic work
    def refresh(self, now: float) -> None:
        """Topic sync, subscription and topic ACL sync; backoff on a topic sync failure."""
        f = self.flow
        try:
            if not self._internal_ok:
                self._internal_ok = self._ensure_internal()
            sync_configs = now >= self._next_configs
            topics = self.topics.refresh(sync_configs=sync_configs)
            if sync_configs:
                self._next_configs = now + f["sync.topic.configs.interval.seconds"]
        except KafkaException as e:
            self.log.warning("%s or %s unreachable (%s); retrying in %.0f s", f.source, f.target,
                             e.args[0].str(), self._backoff)
            self._retry_refresh(now)
            return
        except Exception:                               # noqa: BLE001 - a surprise must not stop the flow
            self.log.exception("topic refresh failed; retrying in %.0f s", self._backoff)
            self._retry_refresh(now)
            return
        self._backoff = 1.0
        interval = f["refresh.topics.interval.seconds"] if f["refresh.topics.enabled"] else 1e9
        self._next_refresh = now + interval
        self.source_counts = topics
        names = sorted(topics)
        if names != self.subscribed:
            if names:
                self.consumer.subscribe(names, on_assign=self._on_assign,
                                        on_revoke=self._on_revoke, on_lost=self._on_lost)
            elif self.subscribed:
                self.consumer.unsubscribe()
            self.log.info("replicating %d topics from %s to %s: %s", len(names), f.source,
                          f.target, ", ".join(names) or "none")
            self.subscribed = names
        if self.held:
            ready = {(t, p) for t, p in self.held
                     if self.topics.target_partitions.get(self.topics.remote(t), 0) > p}
            if ready:
                self.consumer.resume([TopicPartition(t, p) for t, p in ready])
                self.held -= ready
        if f["sync.topic.acls.enabled"]:
            try:
                self.acls.sync()
            except Exception:                           # noqa: BLE001 - records go on without ACLs
                self.log.exception("topic ACL sync failed; retried at the next refresh")

    def _retry_refresh(self, now: float) -> None:
        self._next_refresh = now + self._backoff
        self._backoff = min(MAX_BACKOFF_S, self._backoff * 2)

    def _ensure_internal(self) -> bool:
        f, p = self.flow, self.flow.policy
        ok = self.topics.ensure_internal(
            {self.syncs_topic: (1, f["offset-syncs.topic.replication.factor"], True)},
            self.source_admin if self.syncs_cluster == f.source else self.target_admin,
            self.syncs_cluster)
        return self.topics.ensure_internal(
            {p.heartbeats_topic(): (1, f["heartbeats.topic.replication.factor"], False),
             p.checkpoints_topic(f.source): (1, f["checkpoints.topic.replication.factor"], True)},
            self.target_admin, f.target) and ok

    def measure_lag(self) -> Dict[str, int]:
        """Lag per source topic over the assigned partitions (high watermark - position,
        from the fetch responses: no request); kept in `self.lag` for the metrics."""
        lag: Dict[str, int] = {}
        try:
            positions = self.consumer.position(self.assigned) if self.assigned else []
        except KafkaException:
            positions = []
        for tp in positions:
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and high >= 0 and tp.offset >= 0:
                lag[tp.topic] = lag.get(tp.topic, 0) + max(0, high - tp.offset)
        self.lag = lag
        return lag

    def progress(self) -> Dict[str, dict]:
        """{source topic: {"mirrored": since last call, "lag": records}}, logged."""
        counts = self.sink.counters.take()
        lag = self.measure_lag()
        out = {t: {"mirrored": counts.get(t, 0), "lag": lag.get(t, 0)}
               for t in sorted(set(counts) | set(lag))}
        for t, v in out.items():
            self.log.info("progress %s -> %s: %d records mirrored, lag %d", t,
                          self.topics.remote(t), v["mirrored"], v["lag"])
        return out

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.step()
        finally:
            self.close()

    def step(self) -> None:
        now = time.monotonic()
        if now >= self._next_refresh:
            self.refresh(now)
        if not self.subscribed:
            self.stop.wait(0.2)
        else:
            msgs = self.consumer.consume(BATCH, timeout=POLL_S)
            good = []
            for m in msgs:
                err = m.error()
                if err is None:
                    good.append(m)
                elif err.code() != KafkaError._PARTITION_EOF:
                    self.log.warning("consume: %s", err.str())
            if good:
                self.sink.write(good)
            self.sink.poll()
            for (t, p), off in self.sink.take_rewinds().items():
                try:
                    self.consumer.seek(TopicPartition(t, p, off))
                except KafkaException as e:
                    self.log.warning("seek %s-%d to %d: %s", t, p, off, e.args[0].str())
        if now >= self._next_commit:
            self.sink.commit(self.consumer)
            self._next_commit = now + self.flow["offset.flush.interval.ms"] / 1000.0
        if self.checkpointer is not None:
            try:
                self.checkpointer.tick()
            except KafkaException as e:
                self.log.warning("checkpoints: %s", e.args[0].str())
        if now >= self._next_progress:
            self.progress()
            self._next_progress = now + self.progress_interval_s
        elif now >= self._next_lag:
            self.measure_lag()
        if now >= self._next_lag:
            self._next_lag = now + 1.0

    def close(self) -> None:
        try:
            self.sink.drain(self.consumer)
        finally:
            self.aux.flush(10)
            if self.checkpointer is not None:
                self.checkpointer.producer.flush(10)
                self.checkpointer.reader.close()
            self.consumer.close()
