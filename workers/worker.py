"""The state of one worker process: the partitions it owns and what serves them.

A worker owns (ARCHITECTURE §1):
* its partitions (`Partition`: log + high watermark), keyed by (topic, index);
* its timing wheel (`Timer`, on a monotonic clock) driven by one asyncio timer, and its
  purgatories (produce, fetch, delete records);
* the group coordinators of the `__consumer_offsets` partitions it owns;
* the transaction coordinator state of the `__transaction_state` partitions it owns
  (`self.transactions`, workers/txn/service.py) and the KIP-890 produce check
  (`self.txn_verifier`);
* its incremental fetch session cache; its collector freezing (workers/gc_freeze.py);
* a read-only copy of the cluster metadata, replaced wholesale when the controller
  pushes a newer epoch (`apply_metadata`): a newer copy creates the logs of partitions
  that became ours and closes/deletes those of topics that went away; in cluster mode
  it also deletes stray logs (a partition directory the metadata does not give this
  broker, or one holding another topic id than the metadata's), renamed
  `<topic>-<p>.<uuid>-delete` first.

Log dirs (`log.dirs`, Kafka's LogManager + LogDirFailureChannel): a partition's log is
in whichever dir holds `<topic>-<p>`, a new one goes to the healthy dir with the fewest
partitions.  Storage errors come from the partitions (`on_storage_error`): a full
disk is logged once and the partition answers KAFKA_STORAGE_ERROR until an append
succeeds again (a log that could not even be opened is retried by housekeeping); any
other error fails the dir (`fail_log_dir`): its partitions on this worker are closed
and answer KAFKA_STORAGE_ERROR (`partition_error`) until a restart finds the dir
usable; with no dir left the worker stops and exits LOG_DIR_FAILURE_EXIT (4), on which
the supervisor stops the broker (exit 1).  `shutdown` returns the exit code: non-zero
when a partition did not close cleanly (a stop's exit code says so).  In cluster mode
the offline replicas are reported to the controller (`report_offline` ->
`log_dir_failed`, mpbroker/controller/zk/), which moves their leadership away.

The periodic work of the logs is workers/housekeeping.py; what is on disk in the log
dirs (stray logs, where a new partition goes) workers/log_dirs.py.

Cluster-scoped changes (create/delete topics, partitions, configs, producer id blocks)
go to the controller through `self.controller`, an object handed in by the process
that starts the worker (layer 4), so this layer never imports the controller.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from typing import Callable

from mpbroker import config as configmod
from mpbroker.metadata.model import (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, ClusterMetadata,
                                     uuid_to_str)
from mpbroker.metadata.placement import PlacementTable
from mpbroker.protocol.errors import ErrorCode
from storage.errors import DISK_FULL_ERRNOS, KafkaStorageError
from storage.checkpoint import fsync_dir
from storage.log import Log, LogConfig

from workers import housekeeping, log_dirs, metrics
from workers.fetch_session import FetchSessionCache
from workers.gc_freeze import GcFreezer
from workers.groups.service import GroupService
from workers.handlers.alter_replica_log_dirs import complete_future
from workers.quotas import ClientQuotas
from workers.loop_timer import LoopTimer
from workers.partition import Partition
from workers.purgatory import Purgatory
from workers.replication import ReplicaManager
from workers.timing_wheel import Timer
from workers.txn.service import TransactionService
from workers.txn.verifier import TxnVerifier

log = logging.getLogger(__name__)

LOG_DIR_FAILURE_EXIT = 4    # every log dir failed: the supervisor stops the broker
UNCLEAN_SHUTDOWN_EXIT = 1   # a stop that left partitions not closed cleanly
OPEN_CHUNK = 64             # new logs opened per turn of the loop (`_open_pending`),
OPEN_SLICE_S = 0.05         # or fewer when these seconds went by (a slow disk)
def now_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Worker:
    """`clock` (epoch ms, wall clock) stamps records and drives what Kafka times by the
    wall clock (segment.ms, retention, ISR lag, group and producer expiry);
    `timer_clock` (monotonic ms, like Kafka's SystemTimer on System.nanoTime) drives the
    timing wheel, so purgatory deadlines and loop timers never jump with the wall
    clock. The two are never compared: the wheel only takes delays."""

    def __init__(self, config, controller, worker_id: int = 0, clock: Callable[[], int] = now_ms,
                 timer_clock: Callable[[], int] = monotonic_ms):
        self.config = config
        self.controller = controller
        self.worker_id = worker_id
        self.clock = clock
        self.broker_id = controller.broker_id
        self.log_dirs = [os.path.normpath(d) for d in config.log_dirs]
        self.log_dir = self.log_dirs[0]       # also holds the metadata (controller)
        self.gc_freezer = GcFreezer()         # frozen by the worker process (workers/main.py)
        self.offline_dirs: dict[str, str] = {}             # failed log dir -> why
        self.offline_partitions: dict[tuple[str, int], str] = {}   # -> its failed dir
        self.metadata: ClusterMetadata | None = None
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.timer = Timer(tick_ms=1, wheel_size=20, clock=timer_clock)
        self.loop_timer: LoopTimer | None = None
        self.produce_purgatory = Purgatory("Produce", self.timer)
        self.fetch_purgatory = Purgatory("Fetch", self.timer)
        self.delete_records_purgatory = Purgatory("DeleteRecords", self.timer)
        self.fetch_sessions = FetchSessionCache(
            max_sessions=config["max.incremental.fetch.session.cache.slots"],
            max_bytes=config["max.incremental.fetch.session.cache.bytes"],
            clock=timer_clock, id_offset=worker_id)
        self.groups = None  # workers.groups.service.GroupService, set by start()
        self.transactions = None  # workers.txn.service.TransactionService, set by start()
        self.txn_verifier = None  # workers.txn.verifier.TxnVerifier, set by start()
        self.listener_host = "127.0.0.1"
        self.listener_port = 0
        self._background: list[asyncio.Task] = []
        self.cleaners = housekeeping.cleaner_manager(config)
        # Placement (mpbroker/metadata/placement.py): one worker owns everything until the
        # controller pushes the shard table; `router` (workers/router.py) is set by the
        # process that builds the mesh (workers/main.py run_worker).
        self.placement = PlacementTable()
        self.router = None
        self.on_placement_applied: Callable[[int], None] | None = None
        self.requests_total = 0        # requests this worker decoded as a front
        self.requests_served = 0       # parts it ran for other fronts
        self.retired_bytes = [0, 0]    # bytes in/out of partitions it no longer has
        self.clients = weakref.WeakSet()  # connections served as a front (for stats)
        self.client_quotas = ClientQuotas(config)   # issue #17: workers/quotas.py
        # Replication (workers/replication.py): the follower partitions this worker
        # owns by placement (not served to clients: NOT_LEADER_OR_FOLLOWER), their
        # fetchers, and the leaders' ISR changes.
        self.followers: dict[tuple[str, int], Partition] = {}
        self.replication = ReplicaManager(self)
        self._strays_checked = None    # the placement revision of the last stray scan
        self.log_dir_failed: str | None = None  # why, once the log dir failed
        self.exit_code = 0             # the worker's exit code (see shutdown)
        self._reopen_pending = False   # a log could not be opened for want of space
        self._offline_reported: set = set()   # offline replicas the controller knows
        self.request_stop: Callable[[], None] | None = None  # workers/server.py sets it
        # New partitions to open (`_reconcile` -> `_open_pending`), in order, and the
        # task that opens them OPEN_CHUNK at a time; the parent dirs of logs created
        # since the last dir fsync (`_sync_new_dirs`).
        self._to_open: dict[tuple[str, int], None] = {}
        self._opener: asyncio.Task | None = None
        self._unsynced_dirs: set[str] = set()
        self._open_all = False         # `start`: every log now, not in chunks
        self._dir_counts: dict[str, int] | None = None   # see partition_dir
        self._ack_when_open: int | None = None   # a placement revision to acknowledge

    # ---------------------------------------------------------------- lifecycle
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop_timer = LoopTimer(self.timer, loop)
        self.gc_freezer.call_later = loop.call_later
        if self.router is not None:
            self.router.start(loop)
        self.groups = GroupService(self)
        self.transactions = TransactionService(self)
        self.txn_verifier = TxnVerifier(self)
        # The logs there are at start open before the worker says it is ready (Kafka's
        # LogManager.startup loads every log first): not in chunks.
        self._open_all = True
        try:
            self.apply_metadata(self.controller.metadata())
        finally:
            self._open_all = False
        self._background.append(loop.create_task(housekeeping.run(self)))

    def shutdown(self) -> None:
        for t in self._background:
            t.cancel()
        self.gc_freezer.cancel()
        if self._opener is not None:
            self._opener.cancel()
            self._opener = None
        self._to_open.clear()
        if self.router is not None:
            self.router.close()
        if self.groups:
            self.groups.shutdown()
        if self.transactions:
            self.transactions.shutdown()
        self.replication.shutdown()
        failed = []
        for p in list(self.partitions.values()) + list(self.followers.values()):
            try:
                p.log.flush()
                p.close()
            except Exception as e:
                failed.append(f"{p.topic}-{p.index}")
                log.error("closing %s-%d failed (it recovers on the next start): %s",
                          p.topic, p.index, e)
        self.partitions.clear()
        self.followers.clear()
        failed += [f"{t}-{i} (offline)" for t, i in self.offline_partitions]
        if failed:
            log.error("%d partitions did not close cleanly (%s%s)", len(failed),
                      ", ".join(failed[:10]), ", ..." if len(failed) > 10 else "")
            self.exit_code = self.exit_code or UNCLEAN_SHUTDOWN_EXIT
        return self.exit_code

    def retry_opens(self) -> None:
        """Open again the logs that could not be opened for want of space (a full
        disk is not a failed dir: the broker serves them once there is room)."""
        if self._reopen_pending and self.metadata is not None:
            self._reopen_pending = False      # set again when there is still no room
            self._reconcile(self.metadata)

    # ---------------------------------------------------------------- metadata
    def owns(self, topic: str, index: int) -> bool:
        """The placement map says this worker owns (topic, index) (mpbroker/metadata/placement.py)."""
        return self.placement.owner(topic, index) == self.worker_id

    def apply_placement(self, table: PlacementTable) -> bool:
        """A new revision of the shard table: close the partitions that went to another
        worker (flushed, clean-shutdown marker written), then open the ones that became
        ours. A revision not newer than ours is ignored. Returns whether it applied."""
        if table.revision <= self.placement.revision:
            return False
        self.placement = table
        if self.metadata is not None:
            self._reconcile(self.metadata)
        if self._to_open:
            self._ack_when_open = table.revision    # acknowledged once they are open
        elif self.on_placement_applied is not None:
            self.on_placement_applied(table.revision)
        return True

    def reload_config(self, cfg) -> None:
        """SIGHUP / dynamic config: the new config; open logs take the new topic defaults."""
        self.config = cfg
        self.replication.reload_config(cfg)
        md = self.metadata
        for (topic, _), p in list(self.partitions.items()) + list(self.followers.items()):
            t = md.topics.get(topic) if md is not None else None
            if t is not None:
                p.log.config = self.log_config(t.configs)
                p.min_isr = self._min_isr(t.configs)

    def stats(self) -> dict:
        """What `mpbroker placement show` reports of this worker (counters; the caller
        takes two samples and divides)."""
        return metrics.placement_stats(self)

    def apply_metadata(self, md: ClusterMetadata) -> None:
        if self.metadata is not None and md.epoch <= self.metadata.epoch:
            return  # stale push: the controller already sent us something newer
        self.metadata = md
        self._reconcile(md)

    def _reconcile(self, md: ClusterMetadata) -> None:
        """Open the partitions this worker hosts: this broker is the leader or in the
        replicas, and this worker owns them by placement. Leader role (served to
        clients, `self.partitions`) when the state names this broker the leader, else
        follower role (`self.followers`, replicated by workers/replication.py). Close
        those no longer hosted: deleted when the topic went away or (cluster mode) this
        broker left the replicas (StopReplica with delete), kept on disk when they only
        moved to another worker or (cluster mode) this broker is among their offline
        replicas while another leads them (StopReplica without delete, controlled
        shutdown). A partition that fails to apply is logged and left for the next push;
        the others still apply; a disk failure (OSError, KafkaStorageError) is fatal.

        Partitions already open are updated here, at once (cheap: no file is touched).
        New ones (a log to open: ~1 ms and more each) go to `_to_open`, opened
        OPEN_CHUNK at a time (`_open_pending`): the first chunk now, the rest by a task
        that lets the loop turn between chunks, so heartbeats and requests keep flowing
        while thousands of new partitions open (a CreateTopics of max.broker.partitions
        partitions).  Until its log is open a partition answers what Kafka answers for
        one the broker does not host yet (NOT_LEADER_OR_FOLLOWER, retriable:
        `partition_error`).  Every push recomputes the set, so a later push wins: a
        partition no longer hosted (its topic deleted, moved to another worker) leaves
        `_to_open` before it is opened, and one still to open is opened with the state
        of the newest metadata (`self.metadata`)."""
        live, stopped = set(), set()
        me = self.broker_id
        now = self.clock()
        settings: dict = {}
        for topic in md.topics.values():
            for index, state in topic.partitions.items():
                hosted = self._hosting(topic.name, index, state)
                if hosted is None:
                    continue
                key = (topic.name, index)
                if hosted == "stopped":
                    stopped.add(key)
                    continue
                live.add(key)
                if key not in self.partitions and key not in self.followers and \
                        key not in self.offline_partitions:
                    self._to_open[key] = None     # a new log: opened in chunks
                    continue
                if not self._apply_one(md, topic, index, state, settings, now):
                    return
        for key in [k for k in self._to_open if k not in live]:
            del self._to_open[key]      # deleted or moved away before it was opened
        try:
            loop = None if self._open_all else asyncio.get_running_loop()
        except RuntimeError:
            loop = None                 # no loop (tests): all of them now
        if not self._open_pending(None if loop is None else OPEN_CHUNK):
            return
        if self._to_open and self._opener is None:
            self._opener = loop.create_task(self._open_in_chunks())
        cluster = bool(self.config.get("zookeeper.connect"))
        for key in [k for k in self.offline_partitions if k not in live]:
            del self.offline_partitions[key]        # deleted or moved away meanwhile
        for key, p in list(self.partitions.items()) + list(self.followers.items()):
            if key not in live:
                t = md.topics.get(key[0])
                st = t.partitions.get(key[1]) if t is not None else None
                gone = st is None or (cluster and me not in st.replicas and st.leader != me)
                try:
                    self._remove_hosted(p, delete=gone and key not in stopped)
                except Exception:
                    log.exception("closing %s-%d", *key)
        self.report_offline()
        if cluster and self._strays_checked != self.placement.revision:
            self._strays_checked = self.placement.revision
            self._delete_strays(live | stopped)
        # Waiters on partitions that changed complete now (they re-check errors).
        for key in list(self.partitions):
            self.fetch_purgatory.check_and_complete(key)
        # DeleteRecords counts followers on live brokers only: a broker that went away
        # may be what a waiter was waiting for.
        for key in self.delete_records_purgatory.watch_keys():
            self.delete_records_purgatory.check_and_complete(key)

    def _hosting(self, topic: str, index: int, state) -> str | None:
        """"live" when this worker hosts (topic, index) in `state`, "stopped" when it
        keeps its log closed (StopReplica without delete), None when not hosted."""
        me = self.broker_id
        if (state.leader != me and me not in state.replicas) or not self.owns(topic, index):
            return None
        if state.leader != me and me in state.offline_replicas:
            return "stopped"
        return "live"

    def _apply_one(self, md, topic, index: int, state, settings: dict, now: int) -> bool:
        """`_apply_partition` with its errors handled; False when the worker's last log
        dir failed (stop applying)."""
        key = (topic.name, index)
        try:
            s = settings.get(topic.name)
            if s is None:
                s = settings[topic.name] = (self.log_config(topic.configs),
                                            self._min_isr(topic.configs))
            self._apply_partition(topic, index, state, s, now)
        except (OSError, KafkaStorageError) as e:
            # Its log dir failed (now offline, see fail_log_dir), or it is full:
            # the partition stays closed (KAFKA_STORAGE_ERROR), a full one is
            # retried with the next push.
            if key not in self.offline_partitions:
                log.warning("opening %s-%d: %s (retried)", topic.name, index, e)
                self._reopen_pending = True
            if self.log_dir_failed is not None:
                return False
        except Exception:
            log.exception("applying metadata epoch %d to %s-%d", md.epoch, topic.name, index)
        return True

    def _open_pending(self, limit: int | None) -> bool:
        """Open up to `limit` (None: all) of the new partitions in `_to_open`, fewer
        when OPEN_SLICE_S went by (at least one), each with its state in the newest
        metadata, then fsync the parent dirs of the logs created (`_sync_new_dirs`)
        before anything is served from them.  False when the worker's last log dir
        failed."""
        md = self.metadata
        if md is None:
            return True
        now = self.clock()
        settings: dict = {}
        opened = []
        self._dir_counts = {}       # `partition_dir`: each log dir listed once a chunk
        until = None if limit is None else time.monotonic() + OPEN_SLICE_S
        try:
            while self._to_open and (limit is None or len(opened) < limit and
                                     (not opened or time.monotonic() < until)):
                key = next(iter(self._to_open))
                del self._to_open[key]
                topic = md.topics.get(key[0])
                state = topic.partitions.get(key[1]) if topic is not None else None
                if state is None or self._hosting(key[0], key[1], state) != "live" or \
                        key in self.partitions or key in self.followers:
                    continue        # (every push prunes `_to_open`: not expected)
                opened.append(key)
                if not self._apply_one(md, topic, key[1], state, settings, now):
                    self._to_open.clear()
                    return False
        finally:
            self._dir_counts = None
            self._sync_new_dirs()
            if not self._to_open and self._ack_when_open is not None:
                rev, self._ack_when_open = self._ack_when_open, None
                if self.on_placement_applied is not None:
                    self.on_placement_applied(rev)    # its new logs are open now
        for key in opened:
            if key in self.partitions:
                self.fetch_purgatory.check_and_complete(key)
        return self.log_dir_failed is None

    async def _open_in_chunks(self) -> None:
        """The rest of `_to_open`, OPEN_CHUNK logs per turn of the loop."""
        try:
            while self._to_open and self.log_dir_failed is None:
                await asyncio.sleep(0)
                self._open_pending(OPEN_CHUNK)
        finally:
            if self._opener is asyncio.current_task():
                self._opener = None

    def _sync_new_dirs(self) -> None:
        """One fsync per log dir for the logs `Log.open` created since the last call
        (it makes the new partition directories' entries durable; the logs' own files
        are not fsynced: storage/log.py, Durability - Kafka's way; an empty new
        partition lost in a crash before anything was appended to it is made again
        on the next open)."""
        while self._unsynced_dirs:
            d = self._unsynced_dirs.pop()
            try:
                fsync_dir(d)
            except OSError as e:
                self.fail_log_dir(d, e)

    def _apply_partition(self, topic, index: int, state, settings, now: int) -> None:
        key = (topic.name, index)
        if key in self.offline_partitions:
            return                  # in a failed log dir: offline until a restart
        p = self.partitions.get(key) or self.followers.get(key)
        if p is not None and p.topic_id != topic.topic_id:
            self._remove_hosted(p, delete=True)
            p = None
        new = p is None
        if new:
            p = self._open_partition(topic, index, state)
        else:
            p.log.config = settings[0]
        p.min_isr = settings[1]
        if state.leader == self.broker_id:
            self._become_leader(p, state, new, now)
        else:
            self._become_follower(p, state, new)

    def _delete_strays(self, hosted: set) -> None:
        """Cluster mode, once per placement revision: partition directories of this
        worker (by placement) that the metadata does not give this broker (not in
        `hosted`: every partition it leads or replicates that this worker owns), left by
        a topic deleted, or being deleted, while this broker was down (Kafka deletes
        such stray logs); and `-delete` directories a crash left behind."""
        for d in self.log_dirs:
            if d not in self.offline_dirs:
                for path in log_dirs.strays(d, self.owns, hosted):
                    log_dirs.delete_dir(path)

    def _become_leader(self, p: Partition, state, new: bool, now: int) -> None:
        """makeLeader: a new leader epoch (epoch cache entry at the log end), follower
        states reset, the ISR from the state; a same-epoch push only updates the ISR."""
        key = p.key
        was_follower = self.followers.pop(key, None) is not None
        if was_follower:
            self.replication.unfollow(key)
        new_epoch = new or was_follower or p.leader_epoch != state.leader_epoch or \
            tuple(state.replicas) != p.replicas
        if new_epoch:
            moved = p.make_leader(self.broker_id, state.leader_epoch, state.replicas,
                                  state.isr, state.partition_epoch, now)
            if p.replicated:
                log.info("leading %s-%d (leader epoch %d from offset %d, ISR %s)", p.topic,
                         p.index, p.leader_epoch, p.leader_epoch_start_offset, list(p.isr))
        else:
            moved = p.update_isr_state(state.isr, state.partition_epoch)
        p.on_isr_change = self.replication.alter_isr
        p.on_hw_change = self.replication.hw_changed
        self.partitions[key] = p
        if new:     # a new log's objects: frozen once the changes settle
            self.gc_freezer.changed()
        if new or was_follower:
            if p.topic == OFFSETS_TOPIC and self.groups:
                self.groups.became_coordinator(p)
            if p.topic == TRANSACTION_STATE_TOPIC and self.transactions:
                self.transactions.became_coordinator(p)
        elif new_epoch and p.topic == TRANSACTION_STATE_TOPIC and self.transactions:
            self.transactions.became_coordinator(p)  # a new coordinator epoch
        if moved and not new:
            self.replication.hw_changed(p)

    def _become_follower(self, p: Partition, state, new: bool) -> None:
        """makeFollower: stop serving clients (NOT_LEADER_OR_FOLLOWER), complete the
        operations waiting on it, and (re)start fetching from the leader, truncating
        first, when the leader or its epoch changed."""
        key = p.key
        was_leader = self.partitions.pop(key, None) is not None
        if was_leader:
            self._resign(p)
        changed = p.make_follower(state.leader, state.leader_epoch, state.replicas, state.isr,
                                  state.partition_epoch)
        p.on_isr_change = p.on_hw_change = None
        self.followers[key] = p
        if new:
            self.gc_freezer.changed()
        if was_leader:
            self.produce_purgatory.check_and_complete(key)
            self.fetch_purgatory.check_and_complete(key)
            self.delete_records_purgatory.check_and_complete(key)
        if changed or new or key not in self.replication.following:
            self.replication.follow(p)

    def _resign(self, p: Partition) -> None:
        if p.topic == OFFSETS_TOPIC and self.groups:
            self.groups.resigned_coordinator(p)
        if p.topic == TRANSACTION_STATE_TOPIC and self.transactions:
            self.transactions.resigned_coordinator(p)

    def _remove_hosted(self, p: Partition, delete: bool) -> None:
        key = p.key
        if self.partitions.get(key) is p:
            self._resign(p)
            del self.partitions[key]
        elif self.followers.get(key) is p:
            del self.followers[key]
            self.replication.unfollow(key)
        self._drop_partition(p, delete=delete)
        self.gc_freezer.changed(removed=True)

    def _min_isr(self, topic_configs: dict) -> int:
        try:
            return int(configmod.effective_topic_config(self.config, topic_configs)
                       .get("min.insync.replicas") or 1)
        except Exception:
            return 1

    def log_config(self, topic_configs: dict) -> LogConfig:
        effective = configmod.effective_topic_config(self.config, topic_configs)
        return LogConfig.from_properties(
            {k: ",".join(v) if isinstance(v, list) else v for k, v in effective.items()
             if v is not None and (not isinstance(v, bool) or k == "preallocate")})

    def partition_dir(self, topic: str, index: int) -> str:
        """Where the log of (topic, index) is: the log dir that holds it, else (a new
        one) the healthy log dir with the fewest partitions, as Kafka places them.
        KafkaStorageError when a log dir cannot tell whether it holds it (a failed
        dir may: the partition is offline rather than started empty elsewhere).
        In no dir, a completed `-future` copy of a move a crash cut short is it
        (workers/handlers/alter_replica_log_dirs.py)."""
        name = f"{topic}-{index}"
        found, unknown = log_dirs.existing(self.log_dirs, name)
        if found is not None:
            return found
        if unknown is not None:
            self.offline_partitions[(topic, index)] = unknown[0]
            raise KafkaStorageError(f"{name}: log dir {unknown[0]} failed: {unknown[1]}")
        moved = complete_future(self.log_dirs, name)    # a move interrupted by a crash
        if moved is not None:
            return moved
        healthy = [d for d in self.log_dirs if d not in self.offline_dirs] or self.log_dirs
        # a chunk of opens counts each dir once (`_dir_counts`)
        return os.path.join(log_dirs.least_used(healthy, self._dir_counts), name)

    def _open_partition(self, topic, index: int, state) -> Partition:
        path = self.partition_dir(topic.name, index)
        try:
            return self._open_log(topic, index, state, path)
        except (OSError, KafkaStorageError) as e:
            if not (isinstance(e, KafkaStorageError) and e.disk_full
                    or getattr(e, "errno", None) in DISK_FULL_ERRNOS):
                self.offline_partitions[(topic.name, index)] = os.path.dirname(path)
                self.fail_log_dir(os.path.dirname(path), e)
            raise

    def _open_log(self, topic, index: int, state, path: str) -> Partition:
        stored = log_dirs.stored_topic_id(path)
        if stored is not None and topic.topic_id is not None and stored != topic.topic_id:
            # a log of an earlier topic of that name (deleted while this broker was down)
            log.warning("%s belongs to topic id %s, not %s's %s: deleting the stray log", path,
                        uuid_to_str(stored), topic.name, uuid_to_str(topic.topic_id))
            log_dirs.delete_dir(path)
        lg = Log.open(path, self.log_config(topic.configs), clock=self.clock,
                      topic_id=topic.topic_id, sync_parent=False)
        if lg.created:
            self._unsynced_dirs.add(os.path.dirname(path))    # `_sync_new_dirs`
        p = Partition(topic.name, index, topic.topic_id, lg, leader_epoch=state.leader_epoch,
                      leader_id=state.leader, replicated=len(state.replicas) > 1)
        p.on_storage_error = self.on_storage_error
        return p

    # ---------------------------------------------------------------- storage errors
    def on_storage_error(self, p: Partition, e: KafkaStorageError | None) -> None:
        """A partition's log failed (Kafka's LogDirFailureChannel).  A full disk is not
        a failed dir: the append was undone, the partition answers KAFKA_STORAGE_ERROR
        and serves again by itself once there is room (logged once each way).  Any
        other error (EIO, EROFS, an append that could not be undone) fails the log
        dir."""
        if e is None:
            log.warning("%s-%d: appends succeed again (there is room on the disk)",
                        p.topic, p.index)
        elif e.disk_full:
            if not p.disk_full:
                p.disk_full = True
                log.warning("%s-%d: no room on the disk, appends answer KAFKA_STORAGE_ERROR "
                            "until there is (logged once): %s", p.topic, p.index, e)
        else:
            self.fail_log_dir(os.path.dirname(p.log.dir), e)

    def report_offline(self) -> None:
        """Cluster mode: tell the controller which replicas are in failed log dirs, so
        that their leadership moves to another replica (ZkController.log_dir_failed)."""
        if not self.config.get("zookeeper.connect"):
            return
        new = set(self.offline_partitions) - self._offline_reported
        if not new:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._offline_reported |= new
        keys = sorted(new)

        async def report():
            try:
                await self.controller.log_dir_failed(keys)
            except Exception as e:
                self._offline_reported -= set(keys)     # the next change reports them
                log.warning("telling the controller about %d offline replicas: %s",
                            len(keys), e)
        self._background.append(loop.create_task(report()))

    def fail_log_dir(self, path: str, cause: BaseException) -> None:
        """The log dir `path` failed (Kafka's LogDirFailureChannel): it goes offline,
        its partitions are closed and answer KAFKA_STORAGE_ERROR (`partition_error`)
        until a restart finds the dir usable again; the other log dirs keep serving.
        With no log dir left Kafka halts the broker: the worker stops (clean shutdown
        of what still closes) and exits LOG_DIR_FAILURE_EXIT, on which the supervisor
        stops the broker with a non-zero exit code instead of respawning the worker."""
        path = os.path.normpath(path)
        if path not in self.log_dirs:
            path = self.log_dir
        if path in self.offline_dirs:
            return
        self.offline_dirs[path] = str(cause)
        closed = 0
        for key, p in list(self.partitions.items()) + list(self.followers.items()):
            if os.path.dirname(p.log.dir) == path:
                self.partitions.pop(key, None)
                self.followers.pop(key, None)
                self.offline_partitions[key] = path
                p.closed = True
                try:
                    p.log.close(clean=False)
                except Exception:
                    pass
                self.cleaners.forget(key)
                self.fetch_purgatory.check_and_complete(key)
                self.produce_purgatory.check_and_complete(key)
                closed += 1
        left = [d for d in self.log_dirs if d not in self.offline_dirs and log_dirs.usable(d)]
        self.report_offline()
        if left:
            log.error("log dir %s failed: %s; its %d partitions on this worker are offline "
                      "(KAFKA_STORAGE_ERROR), log dirs %s keep serving", path, cause, closed,
                      ", ".join(left))
            return
        self.log_dir_failed = f"{path}: {cause}"
        log.error("log dir %s failed: %s; no log dir left: stopping the broker", path, cause)
        self.exit_code = LOG_DIR_FAILURE_EXIT
        if self.request_stop is not None:
            self.request_stop()

    def _drop_partition(self, p: Partition, delete: bool) -> None:
        self.cleaners.forget(p.key)
        self.retired_bytes[0] += p.bytes_in
        self.retired_bytes[1] += p.bytes_out
        try:
            if delete:
                p.delete()
            else:
                p.close()
        except Exception:
            log.exception("dropping %s-%d", p.topic, p.index)
        self.fetch_purgatory.check_and_complete(p.key)
        self.produce_purgatory.check_and_complete(p.key)
        self.delete_records_purgatory.check_and_complete(p.key)

    async def next_producer_id(self) -> int:
        return await self.controller.allocate_producer_id()

    # ---------------------------------------------------------------- lookups
    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def topic_name_for_id(self, topic_id: bytes) -> str | None:
        """The name of the topic with `topic_id` (None: no such topic)."""
        md = self.metadata
        t = md.topics_by_id.get(topic_id) if md is not None else None
        return None if t is None else t.name

    def partition_error(self, topic: str, index: int) -> int:
        """Error code for a partition-scoped request to (topic, index) that we cannot serve."""
        t = self.metadata.topics.get(topic)
        if t is None or index not in t.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if t.partitions[index].leader != self.broker_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if (topic, index) in self.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
