"""The write side of the pipeline: records to the target, and the source offsets they
came from committed only once the records are safe (`task.FlowTask` owns both sinks).

* `AtLeastOnceSink` (exactly.once.support=disabled, the default): one idempotent producer
  (acks=all, enable.gapless.guarantee) per process and flow. Every
  offset.flush.interval.ms, on revocation and on SIGTERM the sink flushes the producer
  (every record written is delivered) and then commits the written positions to the
  flow's group on the SOURCE (Connect's offset flush). With the gapless guarantee a
  record that cannot be delivered is a fatal producer error (error_cb), which stops the
  flow before anything after it is committed: the process exits 1 and its restart, or
  the group's next owner, re-reads from the last commit. So a crash re-mirrors at most
  what was written since the last commit, and nothing is skipped. Delivery reports (a
  Python callback per record would halve the throughput) are asked for only for the
  records that carry an offset sync.

* `TransactionalSink` (exactly.once.support=enabled, KIP-618's guarantee): one
  transactional producer per assigned source partition, transactional.id
  `mm2-A->B-<topic>-<partition>`. Each batch of a partition is one transaction on the
  TARGET holding its records and the next source offset, committed with
  TxnOffsetCommit to the flow's group on the target, keyed by the remote topic-partition
  (the source topic may not exist there). On assignment the producer's
  InitProducerId fences whichever process held the partition before (its open
  transaction is aborted) and only then is the position read from the target
  (read_committed), so a record is in the target's committed log iff its offset is
  covered by the committed position: no loss, no duplicate across kill -9 and restart.
  Why per partition and not per process: the partition is the unit that moves between
  group members, and a transactional.id that moves with it is what lets the new owner
  fence a zombie that still believes it owns it (a per-process id would fence nobody).

Both sinks report (source offset, target offset) of delivered/committed records to an
`OffsetSyncWriter`, which writes MM2's offset syncs (`offset_sync.SyncPolicy` decides).
"""
from __future__ import annotations

import logging
from collections import defaultdict, deque
from typing import Callable, Deque, Dict, Iterable, List, Optional, Tuple

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaException, Producer, TopicPartition

from mpbroker.mirror.offset_sync import SyncPolicy  # the rule AtLeastOnceSink.write inlines
from mpbroker.mirror.records import OffsetSync

TP = Tuple[str, int]
TXN_TIMEOUT_S = 30.0


def record_kwargs(msg) -> dict:
    """Producer.produce keywords that keep partition, key, value, headers, timestamp."""
    kw = {"partition": msg.partition(), "key": msg.key(), "value": msg.value()}
    headers = msg.headers()
    if headers:
        kw["headers"] = headers
    ts_type, ts = msg.timestamp()
    if ts_type != TIMESTAMP_NOT_AVAILABLE:
        kw["timestamp"] = ts
    return kw


def produce(producer: Producer, topic: str, kw: dict, on_delivery) -> None:
    """produce, waiting (serving delivery reports) while the local queue is full."""
    while True:
        try:
            producer.produce(topic, on_delivery=on_delivery, **kw)
            return
        except BufferError:
            producer.poll(0.05)


class OffsetSyncWriter:
    """Offset syncs of one flow to its offset-syncs topic (or nowhere)."""

    def __init__(self, producer: Optional[Producer], topic: str, max_lag: int):
        self.producer = producer
        self.topic = topic
        self.policy = SyncPolicy(max_lag)

    def due(self, tp: TP, upstream: int) -> bool:
        """Called for every record written, in order: is a sync due at this one?"""
        return self.producer is not None and self.policy.update(tp, upstream)

    def write(self, tp: TP, upstream: int, downstream: int) -> None:
        sync = OffsetSync(tp[0], tp[1], upstream, downstream)
        produce(self.producer, self.topic, {"key": sync.key(), "value": sync.value(),
                                            "partition": 0}, None)

    def forget(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self.policy.forget(tp)


class Counters:
    """Records mirrored per source topic: since the last take() (the progress log) and
    since the start (`totals`, the metrics' counters)."""

    def __init__(self):
        self._n: Dict[str, int] = defaultdict(int)
        self.totals: Dict[str, int] = defaultdict(int)
        self.total = 0

    def add(self, topic: str, n: int = 1) -> None:
        self._n[topic] += n
        self.totals[topic] += n
        self.total += n

    def take(self) -> Dict[str, int]:
        out, self._n = dict(self._n), defaultdict(int)
        return out


class AtLeastOnceSink:
    def __init__(self, make_producer: Callable[[Callable], Producer], remote: Callable[[str], str],
                 syncs: OffsetSyncWriter, log: logging.Logger):
        self.producer = make_producer(self.on_error)    # its error_cb
        self.remote = remote
        self.syncs = syncs
        self.log = log
        self.counters = Counters()
        self.fatal = None                               # set by on_error (the producer's error_cb)
        self._source_of: Dict[str, str] = {}
        self._remote_of: Dict[str, str] = {}
        self._written: Dict[TP, int] = {}               # next source offset, per partition
        self._committed: Dict[TP, int] = {}
        self._sync_at: Dict[TP, List[int]] = {}         # tp -> [next sync offset, previous offset]
        self._inflight: Dict[TP, Deque[int]] = defaultdict(deque)   # offsets awaiting a sync report

    def on_error(self, err) -> None:
        """The producer's error_cb: a fatal error means a record may be lost (the
        gapless guarantee): nothing written since the last commit is committed."""
        if err.fatal():
            self.fatal = err
        else:
            self.log.info("producer: %s", err.str())

    def write(self, msgs: List) -> None:
        # The hot loop: per record only what cannot be avoided. Delivery reports (a
        # Python callback each) are asked for only where an offset sync is due
        # (SyncPolicy's rule, inlined: first record, a gap, offset.lag.max records).
        remote_of, written, sync_at = self._remote_of, self._written, self._sync_at
        produce_ = self.producer.produce
        max_lag = self.syncs.policy.max_lag if self.syncs.producer is not None else None
        run_topic, run = None, 0                        # records per topic, counted by runs
        for m in msgs:
            topic, part, offset = m.topic(), m.partition(), m.offset()
            tp = (topic, part)
            if topic != run_topic:
                if run:
                    self.counters.add(run_topic, run)
                run_topic, run = topic, 0
            run += 1
            remote = remote_of.get(topic)
            if remote is None:
                remote = remote_of[topic] = self.remote(topic)
                self._source_of[remote] = topic
            kw = record_kwargs(m)
            if max_lag is not None:
                st = sync_at.get(tp)
                if st is None or offset >= st[0] or offset != st[1] + 1:
                    sync_at[tp] = st = [offset + max_lag, offset]
                    kw["on_delivery"] = self._synced
                    self._inflight[tp].append(offset)
                st[1] = offset
            while True:
                try:
                    produce_(remote, **kw)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            written[tp] = offset + 1
        if run:
            self.counters.add(run_topic, run)
        self.producer.poll(0)

    def _synced(self, err, msg) -> None:
        tp = (self._source_of[msg.topic()], msg.partition())
        q = self._inflight.get(tp)
        if q:
            offset = q.popleft()
            if err is None:
                self.syncs.write(tp, offset, msg.offset())

    def poll(self) -> None:
        self.producer.poll(0)
        if self.fatal is not None:
            raise RuntimeError(f"fatal producer error: {self.fatal.str()}")

    def take_rewinds(self) -> Dict[TP, int]:
        return {}                                       # failures are fatal: see module doc

    def commit(self, consumer, tps: Optional[Iterable[TP]] = None, sync: bool = False) -> None:
        """Deliver everything written (flush), then commit the written positions (of
        `tps`, default all) to the source group: Connect's offset flush."""
        chosen = [tp for tp in (self._written if tps is None else tps)
                  if tp in self._written and self._written[tp] != self._committed.get(tp)]
        if not chosen:
            return
        left = self.producer.flush(TXN_TIMEOUT_S)
        self.poll()                                     # raises on a fatal error
        if left:
            self.log.warning("%d records not delivered yet; source offsets not committed", left)
            return
        offsets = [TopicPartition(t, p, self._written[(t, p)]) for t, p in chosen]
        try:
            consumer.commit(offsets=offsets, asynchronous=not sync)
            for tp in chosen:
                self._committed[tp] = self._written[tp]
        except KafkaException as e:
            self.log.warning("committing source offsets failed: %s", e.args[0].str())

    def revoke(self, consumer, tps: List[TP], commit: bool = True) -> None:
        """Partitions leave this process: deliver what is in flight, commit it, forget."""
        if commit:
            self.commit(consumer, tps, sync=True)
        for tp in tps:
            self._written.pop(tp, None)
            self._committed.pop(tp, None)
            self._sync_at.pop(tp, None)
            self._inflight.pop(tp, None)

    def drain(self, consumer) -> None:
        self.commit(consumer, sync=True)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        return {}                                       # the source group's committed offsets


class TransactionalSink:
    def __init__(self, make_producer: Callable[[str], Producer], group_id: str, reader,
                 remote: Callable[[str], str], syncs: OffsetSyncWriter, log: logging.Logger):
        self.make_producer = make_producer
        self.group_id = group_id
        self.reader = reader                            # a target consumer of group_id
        self.group_metadata = reader.consumer_group_metadata()
        self.remote = remote
        self.syncs = syncs
        self.log = log
        self.counters = Counters()
        self.producers: Dict[TP, Producer] = {}
        self._inflight: Dict[TP, Deque[int]] = defaultdict(deque)
        self._done: Dict[TP, List[Tuple[int, int]]] = defaultdict(list)
        self._committed: Dict[TP, int] = {}
        self._dirty: set = set()
        self._rewind: Dict[TP, int] = {}
        self._tp_of: Dict[TP, TP] = {}                   # (remote topic, partition) -> source

    def transactional_id(self, tp: TP) -> str:
        return f"{self.group_id}-{tp[0]}-{tp[1]}"

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        """Fence the partitions' previous owners, then read their positions from the
        offsets committed on the target (absent: the source group's, else the reset)."""
        for tp in tps:
            if tp not in self.producers:
                p = self.make_producer(self.transactional_id(tp))
                p.init_transactions(TXN_TIMEOUT_S)
                self.producers[tp] = p
        got = self.reader.committed([TopicPartition(self.remote(t), p) for t, p in tps],
                                    timeout=TXN_TIMEOUT_S)
        out = {}
        for (t, p), c in zip(tps, got):
            if c.error is None and c.offset >= 0:
                out[(t, p)] = c.offset
        return out

    def _delivered(self, err, msg) -> None:
        tp = self._tp_of.get((msg.topic(), msg.partition()))
        q = self._inflight.get(tp) if tp else None
        if not q:
            return
        offset = q.popleft()
        if err is None and self.syncs.due(tp, offset):
            self._done[tp].append((offset, msg.offset()))

    def write(self, msgs: List) -> None:
        by_tp: Dict[TP, List] = defaultdict(list)
        for m in msgs:
            tp = (m.topic(), m.partition())
            if tp not in self._rewind:
                by_tp[tp].append(m)
        # Two passes: every partition's transaction is begun and filled first, so its
        # records are on the wire while earlier partitions commit (each commit waits
        # for its own records, then EndTxn).
        open_txns = []
        for tp, batch in by_tp.items():
            producer = self.producers.get(tp)
            if producer is None:
                continue                                # fenced: the group takes it away
            remote = self.remote(tp[0])
            self._tp_of[(remote, tp[1])] = tp
            try:
                producer.begin_transaction()
                for m in batch:
                    produce(producer, remote, record_kwargs(m), self._delivered)
                    self._inflight[tp].append(m.offset())
            except KafkaException as e:
                self._failed(tp, producer, batch[0].offset(), e.args[0])
                continue
            open_txns.append((tp, producer, remote, batch))
        for tp, producer, remote, batch in open_txns:
            next_offset = batch[-1].offset() + 1
            try:
                producer.send_offsets_to_transaction(
                    [TopicPartition(remote, tp[1], next_offset)], self.group_metadata,
                    TXN_TIMEOUT_S)
                producer.commit_transaction(TXN_TIMEOUT_S)
            except KafkaException as e:
                self._failed(tp, producer, batch[0].offset(), e.args[0])
                continue
            producer.poll(0)
            for up, down in self._done.pop(tp, ()):
                self.syncs.write(tp, up, down)
            self._inflight.pop(tp, None)
            self._committed[tp] = next_offset
            self._dirty.add(tp)
            self.counters.add(tp[0], len(batch))

    def _failed(self, tp: TP, producer: Producer, first: int, err) -> None:
        self._inflight.pop(tp, None)
        self._done.pop(tp, None)
        self.syncs.forget([tp])
        if err.txn_requires_abort() or err.retriable():
            try:
                producer.abort_transaction(TXN_TIMEOUT_S)
                self.log.warning("transaction for %s-%d aborted (%s); re-reading from offset %d",
                                 tp[0], tp[1], err.str(), first)
                self._rewind[tp] = first
                return
            except KafkaException as e:
                err = e.args[0]
        # Fatal (fenced: another process initialised this partition's transactional.id,
        # so it owns the partition now): stop writing it until the group reassigns it.
        self.log.warning("producer for %s-%d is fenced or failed (%s): partition left to its "
                         "new owner", tp[0], tp[1], err.str())
        self.producers.pop(tp, None)

    def poll(self) -> None:
        pass

    def take_rewinds(self) -> Dict[TP, int]:
        out, self._rewind = self._rewind, {}
        return out

    def commit(self, consumer, tps: Optional[Iterable[TP]] = None, sync: bool = False) -> None:
        """Mirror the target's committed positions to the source group, for lag
        monitoring only (positions come from the target)."""
        chosen = self._dirty if tps is None else self._dirty & set(tps)
        offsets = [TopicPartition(t, p, self._committed[(t, p)]) for t, p in chosen]
        self._dirty -= set(chosen)
        if offsets:
            try:
                consumer.commit(offsets=offsets, asynchronous=not sync)
            except KafkaException as e:
                self.log.info("committing source offsets (monitoring only) failed: %s",
                              e.args[0].str())

    def revoke(self, consumer, tps: List[TP], commit: bool = True) -> None:
        if commit:
            self.commit(consumer, tps, sync=True)
        for tp in tps:
            p = self.producers.pop(tp, None)
            if p is not None:
                p.flush(1.0)
            self._committed.pop(tp, None)
            self._dirty.discard(tp)
            self._rewind.pop(tp, None)
        self.syncs.forget(tps)

    def drain(self, consumer) -> None:
        self.commit(consumer, sync=True)
