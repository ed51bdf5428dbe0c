"""The ZooKeeper controller (cluster mode): runs in every broker's controller process when
`zookeeper.connect` is set, instead of the EmbeddedController, with the same
worker-facing methods.

Ownership (one process per broker, all of them peers):

* ZooKeeper holds the cluster metadata in Kafka's znodes (formats and paths:
  `mpbroker/controller/zkdata.py`). This process is the only one of its broker that talks
  to ZooKeeper (one kazoo session = the broker's registration and, when elected, its
  controllership).
* Every broker's controller process keeps a cache of the znodes it watches
  (`/brokers/ids`, `/controller`, `/brokers/topics`, each topic znode, each partition's
  state znode, `/config/topics/<t>`) and builds from it a `ClusterMetadata` view (live
  brokers only; `partition_epoch` = the state znode's version) that it pushes to its
  workers whenever it changes, with a strictly increasing `epoch`.
* One broker at a time is the active controller: it created the ephemeral `/controller`
  together with an increment of `/controller_epoch` (one ZooKeeper multi-op). Only the
  active controller initializes partition states, elects leaders (elections.py), shrinks
  the ISR of dead brokers and of followers shutting down, deletes topics
  (`/admin/delete_topics`), handles preferred elections
  (`/admin/preferred_replica_election`, ElectLeaders, auto leader rebalance), consumes
  `/isr_change_notification`, and serves ControlledShutdown. Every one of its writes
  (partition states, topic znodes, topic deletion, the /admin and ISR-notification
  cleanups) is a multi-op whose first op checks `/controller_epoch`'s version
  (`_fenced`/`_commit`), so a deposed controller (session expired, a newer epoch written)
  can never change anything: its write fails and it resigns. CreatePartitions, served by
  any broker, checks the version this broker last read.
* Topic deletion (Kafka's TopicDeletionManager): `/admin/delete_topics/<t>` marks the
  topic; every broker watches those children and leaves a marked topic out of its view
  (clients get UNKNOWN_TOPIC_OR_PARTITION, workers delete their logs). The active
  controller stops electing for it and sends StopReplica(delete=true) to every replica,
  again every few seconds until each answered, also to a replica whose broker was down
  and came back; only when all answered does it remove the topic's znodes and the
  request. A replica offline keeps the deletion pending (the name cannot be reused).
* Leaders change their ISR themselves (`alter_partition`, any broker): a conditional set
  of the state znode on its version, then an `/isr_change_notification/isr_change_` znode.
  An ISR may only grow by brokers that are registered and not shutting down
  (INELIGIBLE_REPLICA, KIP-841).
* Controlled shutdown (`controlled_shutdown` on the active controller): leaderships move
  away, the broker leaves the ISRs it follows, and it gets StopReplica(delete=false) for
  the partitions it follows, so its replica fetchers stop (it shows itself in their
  offline replicas, which its workers read as "close, keep the log").
* Controller -> broker requests: the active controller also sends LeaderAndIsr /
  UpdateMetadata / StopReplica over the Kafka protocol (one sender task per broker);
  a receiving broker (`controller_request`) checks the controller and broker epochs and
  re-reads the named znodes. Reassignments (KIP-455) live in the topic znodes'
  `adding_replicas` / `removing_replicas`.
* `request_controlled_shutdown` is the stopping broker's side of controlled shutdown
  (`controlled.shutdown.max.retries` attempts, then it stops anyway).
* Session expiry (kazoo LOST): stop acting as controller at once; on the new session,
  register the broker again, reload every watch, run for controller again.

Threads: kazoo calls the watch and state callbacks on its own threads; they only hand
the event to this process's asyncio loop (`call_soon_threadsafe`), where all the work
runs (kazoo's async calls are bridged to asyncio futures).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import replace
from typing import Dict, Optional, Set, Tuple

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError, NoNodeError,
                              RolledBackError)
from kazoo.handlers.threading import KazooTimeoutError

from mpbroker import config as configmod
from mpbroker.controller import broker_requests, elections
from mpbroker.controller import zkdata as Z
from mpbroker.controller.embedded import EmbeddedController, internal_topic_spec
from mpbroker.metadata import model, store
from mpbroker.metadata.model import INTERNAL_TOPICS, MetadataError
from mpbroker.metadata.quota import THROTTLING_MESSAGE
from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TICK_S = 1.0
CONTROLLED_SHUTDOWN = 7
DELETE_RETRY_S = 5.0      # StopReplica(delete) again to a replica that has not answered
                          # (at once after a failed send, or when its broker registers)
MULTI_OPS = 1000          # znodes deleted per ZooKeeper transaction (jute.maxbuffer is 1 MiB)


class ZkController(EmbeddedController):
    """The worker-facing controller API over ZooKeeper (see the module docstring)."""

    # ----------------------------------------------------------------- boot (sync)
    def __init__(self, cfg: configmod.BrokerConfig, advertised: Tuple[str, int] = ("127.0.0.1", 9092)):
        self.cfg = cfg
        self.log_dir = cfg.log_dirs[0]
        os.makedirs(self.log_dir, exist_ok=True)
        self.advertised = advertised
        self.connect = cfg["zookeeper.connect"]
        self.session_timeout_s = cfg["zookeeper.session.timeout.ms"] / 1000
        timeout_ms = cfg.zookeeper_connection_timeout_ms
        try:
            hosts, chroot = Z.split_connect(self.connect)
        except ValueError as e:
            raise configmod.ConfigError(str(e))
        try:
            if chroot:   # Kafka creates the chroot path when it is missing
                boot = KazooClient(hosts, timeout=self.session_timeout_s)
                try:
                    boot.start(timeout=timeout_ms / 1000)
                    boot.ensure_path(chroot)
                finally:
                    boot.stop()
                    boot.close()
            self.zk = KazooClient(hosts + chroot, timeout=self.session_timeout_s)
            self.zk.start(timeout=timeout_ms / 1000)
        except KazooTimeoutError:
            raise configmod.ConfigError(
                f"Timed out waiting for connection to ZooKeeper at {self.connect} "
                f"within zookeeper.connection.timeout.ms={timeout_ms}") from None
        try:
            for path in Z.PERSISTENT_PATHS:
                self.zk.ensure_path(path)
            self.cluster_id = self._cluster_id_sync()
            self.broker_id = self._meta_properties_sync()
        except configmod.ConfigError:
            self.zk.stop()
            self.zk.close()
            raise
        self.md = model.ClusterMetadata(self.cluster_id)
        self.workers: list = []
        self._pid_next, self._pid_end = 0, 0
        self._dynamic_path = os.path.join(self.log_dir, store.METADATA_DIR, "broker-configs.json")
        self._dynamic = self._load_json(self._dynamic_path, {"broker": {}, "default": {}})
        self._broker_cfg = cfg.with_dynamic(broker=self._dynamic["broker"],
                                            default=self._dynamic["default"])
        self._init_limits()
        # the cache of watched znodes
        self.brokers: Dict[int, Z.BrokerInfo] = {}
        self.topics: Dict[str, Z.TopicAssignment] = {}
        self.topic_versions: Dict[str, int] = {}
        self.states: Dict[Tuple[str, int], Z.LeaderAndIsr] = {}
        self.configs: Dict[str, Dict[str, str]] = {}
        self.controller_id = -1
        self.deleting: Set[str] = set()     # the children of /admin/delete_topics
        self._stopped: Set[Tuple[str, int]] = set()  # StopReplica(delete=false) received
        self.seen_epoch_zk_version = -1     # /controller_epoch's version when last read
        # the active controller's state
        self.active = False
        self.controller_epoch = 0
        self.epoch_zk_version = -1
        self.shutting_down: Set[int] = set()
        # replicas in failed log dirs, per partition (Z.OFFLINE_REPLICAS); ours as told
        self.offline: Dict[Tuple[str, int], Set[int]] = {}
        self._offline_mine: Set[Tuple[str, int]] = set()
        self.broker_epoch = -1
        self.seen_controller_epoch = 0      # the newest /controller_epoch this broker knows
        self._outbox: Dict[int, dict] = {}  # broker id -> {"changed", "lai", "stop"}
        self._del_acked: Dict[str, Set[int]] = {}   # topic -> replicas that deleted it
        self._del_sent: Dict[Tuple[str, int], float] = {}
        self._senders: Dict[int, asyncio.Task] = {}
        self._conns: Dict[int, object] = {}
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._dirty: Set[str] = set()
        self._wake: Optional[asyncio.Event] = None
        self._closing = False
        self._session_lost = False
        self._need_full = False
        self._admin_dirty = False
        self._last_rebalance = time.monotonic()
        self._task: Optional[asyncio.Task] = None
        self._lock: Optional[asyncio.Lock] = None

    def _cluster_id_sync(self) -> str:
        try:
            self.zk.create(Z.CLUSTER_ID, Z.cluster_id_json(model.generate_cluster_id()), makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.zk.get(Z.CLUSTER_ID)
        try:
            return Z.parse_cluster_id(data)
        except Z.ZkDataError as e:
            raise configmod.ConfigError(str(e))

    def _meta_properties_sync(self) -> int:
        """meta.properties in every log dir (seed 000 §6.5.1): stored and configured
        broker ids must agree, the stored cluster id must be ZooKeeper's; a broker without
        an id gets one from /brokers/seqid (above reserved.broker.max.id)."""
        cfg = self.cfg
        try:
            stored = set()
            for d in cfg.log_dirs:
                props = store.read_meta_properties(d)
                if props is not None:
                    stored.add(int(props["broker.id"]))
            broker_id = cfg.broker_id
            if broker_id < 0 and not stored and cfg["broker.id.generation.enable"]:
                stat = self.zk.set(Z.BROKER_SEQID, b"")
                broker_id = stat.version + cfg["reserved.broker.max.id"]
            broker_id, _ = store.ensure_meta_properties(
                cfg.log_dirs, broker_id, self.cluster_id,
                reserved_broker_max_id=cfg["reserved.broker.max.id"],
                generation_enabled=cfg["broker.id.generation.enable"])
        except store.MetadataStoreError as e:
            raise configmod.ConfigError(f"{type(e).__name__}: {e}")
        return broker_id

    # ----------------------------------------------------------------- asyncio bridge
    def _z(self, fn, *args, **kw):
        """Run a kazoo *_async call; an asyncio future of its result."""
        loop = self.loop
        fut = loop.create_future()

        def settle(ok, value):
            if not fut.done():
                (fut.set_result if ok else fut.set_exception)(value)

        def done(ar):
            try:
                res = (True, ar.get_nowait())
            except Exception as e:
                res = (False, e)
            try:
                loop.call_soon_threadsafe(settle, *res)
            except RuntimeError:
                pass              # the loop is closed: the process is stopping
        fn(*args, **kw).rawlink(done)
        return asyncio.wait_for(fut, max(5.0, self.session_timeout_s * 2))

    def _watch(self, event) -> None:      # kazoo thread
        try:
            self.loop.call_soon_threadsafe(self._mark, event.path)
        except RuntimeError:
            pass

    def _mark(self, path: str) -> None:
        if path is None:        # a session event (no znode): _on_state handles it
            return
        self._dirty.add(path)
        self._wake.set()

    def _state_listener(self, state) -> None:   # kazoo thread: never block here
        try:
            self.loop.call_soon_threadsafe(self._on_state, state)
        except RuntimeError:
            pass

    def _on_state(self, state) -> None:
        if self._closing:
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session of broker %d expired%s", self.broker_id,
                        ": resigning as controller" if self.active else "")
            self._resign()
            self._session_lost = True
        elif state == KazooState.SUSPENDED:
            log.info("ZooKeeper connection suspended")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._need_full = True
            self._wake.set()

    # ----------------------------------------------------------------- lifecycle
    async def start(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self.loop = loop or asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._pid_lock = asyncio.Lock()
        self.zk.add_listener(self._state_listener)
        await self._register()
        await self._full_reload()
        await self._elect()
        self._publish()
        self._task = self.loop.create_task(self._run())

    def close(self) -> None:
        self._closing = True
        self.active = False
        if self._task is not None:
            self._task.cancel()
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            log.exception("closing the ZooKeeper client")

    def register_broker(self, broker_id: int, host: str, port: int, rack=None) -> None:
        """Cluster mode registers in ZooKeeper at start(); this sets the advertised address."""
        self.advertised = (host, port)

    async def _register(self) -> None:
        """The ephemeral /brokers/ids/<id>. A node left by our previous process (kill -9)
        goes away when its session expires: wait for that, then fail clearly."""
        path = Z.broker_path(self.broker_id)
        data = Z.broker_json(self.broker_id, *self.advertised, rack=self.cfg.get("broker.rack"))
        deadline = time.monotonic() + self.session_timeout_s * 2 + 5
        while True:
            try:
                await self._z(self.zk.create_async, path, data, ephemeral=True)
                break
            except NodeExistsError:
                try:
                    _, stat = await self._z(self.zk.get_async, path)
                    if stat.ephemeralOwner == self.zk.client_id[0]:
                        break
                except NoNodeError:
                    continue
                if time.monotonic() > deadline:
                    raise configmod.ConfigError(
                        f"Error while creating ephemeral at {path}, node already exists and owner "
                        "does not match current session: is another broker running with broker.id "
                        f"{self.broker_id}?")
                await asyncio.sleep(0.5)
        _, stat = await self._z(self.zk.get_async, path)
        self.broker_epoch = stat.czxid
        if self._offline_mine:          # a new session lost the ephemeral list
            await self._publish_offline()
        log.info("registered broker %d at %s:%d (broker epoch %d)", self.broker_id,
                 *self.advertised, self.broker_epoch)

    async def _run(self) -> None:
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if self._session_lost or not self.zk.connected:
                continue
            dirty, self._dirty = self._dirty, set()
            try:
                if self._need_full:
                    self._need_full = False
                    await self._register()
                    await self._full_reload()
                for path in dirty:
                    await self._refresh(path)
                self._publish()
                if self.controller_id == -1:
                    await self._elect()
                if self.active:
                    await self._controller_tick()
                    self._publish()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not self._closing:
                    log.warning("controller loop: %s: %s (retrying)", type(e).__name__, e)
                    self._dirty |= dirty
                    await asyncio.sleep(0.2)

    # ----------------------------------------------------------------- the cache
    async def _full_reload(self) -> None:
        await self._load_brokers()
        await self._load_controller()
        await self._load_deletions()
        await self._load_topics(all_topics=True)
        await self._load_offline()

    async def _refresh(self, path: str) -> None:
        if path == Z.BROKER_IDS:
            await self._load_brokers()
        elif path == Z.CONTROLLER:
            await self._load_controller()
        elif path == Z.TOPICS:
            await self._load_topics()
        elif path == Z.DELETE_TOPICS:
            await self._load_deletions()
            self._admin_dirty = True
        elif path in (Z.PREFERRED_ELECTION, Z.ISR_CHANGES, Z.REASSIGN):
            self._admin_dirty = True
        elif path == Z.OFFLINE_REPLICAS or path.startswith(Z.OFFLINE_REPLICAS + "/"):
            await self._load_offline()
        else:
            tp = Z.parse_state_path(path)
            if tp is not None:
                if tp[0] in self.topics:
                    await self._load_state(*tp)
            elif path.startswith(Z.TOPICS + "/"):
                name = path[len(Z.TOPICS) + 1:]
                if "/" not in name:
                    await self._load_topic(name)
            elif path.startswith(Z.CONFIG_TOPICS + "/"):
                name = path[len(Z.CONFIG_TOPICS) + 1:]
                if name in self.topics:
                    await self._load_config(name)

    async def _load_brokers(self) -> None:
        ids = await self._z(self.zk.get_children_async, Z.BROKER_IDS, self._watch)
        brokers = {}
        for s in ids:
            try:
                bid = int(s)
                data, stat = await self._z(self.zk.get_async, Z.broker_path(bid))
                brokers[bid] = Z.parse_broker(bid, data, stat.czxid)
            except NoNodeError:
                continue
            except (ValueError, Z.ZkDataError) as e:
                log.warning("ignoring broker registration %s: %s", s, e)
        gone = set(self.brokers) - set(brokers)
        new = set(brokers) - set(self.brokers)
        if gone or new:
            log.info("live brokers %s (new %s, gone %s)", sorted(brokers), sorted(new), sorted(gone))
        for b in gone:
            self.shutting_down.discard(b)
        for b in brokers:        # a broker that re-registered (new epoch) is not shutting down
            old = self.brokers.get(b)
            if old is None or old.epoch != brokers[b].epoch:
                self.shutting_down.discard(b)
                for key in [k for k in self._del_sent if k[1] == b]:
                    del self._del_sent[key]     # pending deletions: StopReplica at once
        self.brokers = brokers
        if self.broker_id not in brokers and self.broker_epoch != -1 and not self._closing \
                and not self._session_lost:
            log.warning("our registration %s is gone: registering again", Z.broker_path(self.broker_id))
            self._need_full = True
            self._wake.set()

    async def _load_offline(self) -> None:
        """Every broker's replicas in failed log dirs (watched): elections leave them out."""
        try:
            ids = await self._z(self.zk.get_children_async, Z.OFFLINE_REPLICAS, self._watch)
        except NoNodeError:
            if await self._z(self.zk.exists_async, Z.OFFLINE_REPLICAS, self._watch) is not None:
                self._mark(Z.OFFLINE_REPLICAS)      # created meanwhile
            ids = []
        offline: Dict[Tuple[str, int], Set[int]] = {}
        for s in ids:
            try:
                data, _ = await self._z(self.zk.get_async, f"{Z.OFFLINE_REPLICAS}/{s}",
                                        self._watch)
                for key in Z.parse_partitions(data, f"{Z.OFFLINE_REPLICAS}/{s}"):
                    offline.setdefault(key, set()).add(int(s))
            except NoNodeError:
                continue
            except (ValueError, Z.ZkDataError) as e:
                log.warning("ignoring %s/%s: %s", Z.OFFLINE_REPLICAS, s, e)
        if offline != self.offline:
            log.info("replicas in failed log dirs: %s", {f"{t}-{p}": sorted(b) for (t, p), b
                                                          in sorted(offline.items())})
        self.offline = offline

    async def _publish_offline(self) -> None:
        data = Z.partitions_json(sorted(self._offline_mine))
        path = Z.offline_replicas_path(self.broker_id)
        try:
            await self._z(self.zk.set_async, path, data)
        except NoNodeError:
            try:
                await self._z(self.zk.create_async, path, data, ephemeral=True, makepath=True)
            except NodeExistsError:         # another worker's report made it meanwhile
                await self._z(self.zk.set_async, path, data)

    async def log_dir_failed(self, partitions) -> None:
        """A worker of this broker lost a log dir: publish our replicas there, so that
        the active controller moves their leadership away and keeps them out of the
        ISR (what Kafka's /log_dir_event_notification leads to)."""
        new = {(str(t), int(p)) for t, p in partitions} - self._offline_mine
        if new:
            self._offline_mine |= new
            log.warning("broker %d: %d replicas in failed log dirs, leadership moves away: %s",
                        self.broker_id, len(new), sorted(new)[:10])
            await self._publish_offline()

    async def _load_controller(self) -> None:
        stat = await self._z(self.zk.exists_async, Z.CONTROLLER, self._watch)
        cid = -1
        if stat is not None:
            try:
                data, _ = await self._z(self.zk.get_async, Z.CONTROLLER)
                cid = Z.parse_controller(data)
            except NoNodeError:
                cid = -1
            except Z.ZkDataError as e:
                log.warning("%s", e)
        if cid != -1:
            try:
                data, stat = await self._z(self.zk.get_async, Z.CONTROLLER_EPOCH)
                self.seen_controller_epoch = max(self.seen_controller_epoch, int(data or b"0"))
                self.seen_epoch_zk_version = stat.version
            except (NoNodeError, ValueError):
                pass
        if cid != self.controller_id:
            log.info("controller is now broker %d", cid)
        self.controller_id = cid
        if self.active and cid != self.broker_id:
            self._resign()
        if cid == -1:
            self._wake.set()

    async def _load_deletions(self) -> None:
        names = set(await self._z(self.zk.get_children_async, Z.DELETE_TOPICS, self._watch))
        if names != self.deleting:
            log.info("topics marked for deletion: %s", sorted(names))
        self.deleting = names

    def _hidden(self, name: str) -> bool:
        """Marked for deletion: out of every view (Kafka's LeaderDuringDelete)."""
        return name in self.deleting and bool(self._broker_cfg["delete.topic.enable"])

    async def _load_topics(self, all_topics: bool = False) -> None:
        names = set(await self._z(self.zk.get_children_async, Z.TOPICS, self._watch))
        for gone in set(self.topics) - names:
            self._drop_topic(gone)
        todo = names if all_topics else names - set(self.topics)
        # all_topics (a new session): states and configs again too, with new watches
        await asyncio.gather(*(self._load_topic(n, full=all_topics) for n in todo))

    def _drop_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        self.topic_versions.pop(name, None)
        self.configs.pop(name, None)
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]

    async def _load_topic(self, name: str, full: bool = False) -> None:
        try:
            data, stat = await self._z(self.zk.get_async, Z.topic_path(name), self._watch)
            ta = Z.parse_topic(name, data)
        except NoNodeError:
            self._drop_topic(name)
            return
        except Z.ZkDataError as e:
            log.warning("ignoring topic %s: %s", name, e)
            return
        if ta.topic_id is None:
            log.warning("topic %s has no topic id in ZooKeeper: ignored", name)
            return
        first = name not in self.topics
        self.topics[name] = ta
        self.topic_versions[name] = stat.version
        for key in [k for k in self.states if k[0] == name and k[1] not in ta.partitions]:
            del self.states[key]
        todo = [p for p in ta.partitions if (name, p) not in self.states or first or full]
        await asyncio.gather(*(self._load_state(name, p) for p in todo))
        if first or full:
            await self._load_config(name)

    async def _load_state(self, name: str, p: int) -> None:
        path = Z.state_path(name, p)
        try:
            data, stat = await self._z(self.zk.get_async, path, self._watch)
        except NoNodeError:
            self.states.pop((name, p), None)
            if await self._z(self.zk.exists_async, path, self._watch) is not None:
                self._mark(path)
            return
        try:
            self.states[(name, p)] = Z.parse_state(data, stat.version, path)
        except Z.ZkDataError as e:
            log.warning("%s", e)

    async def _load_config(self, name: str) -> None:
        path = Z.topic_config_path(name)
        try:
            data, _ = await self._z(self.zk.get_async, path, self._watch)
            self.configs[name] = Z.parse_config(data, path)
        except NoNodeError:
            self.configs[name] = {}
            await self._z(self.zk.exists_async, path, self._watch)
        except Z.ZkDataError as e:
            log.warning("%s", e)

    def _build(self) -> model.ClusterMetadata:
        brokers = {i: model.Broker(b.id, b.host, b.port, b.rack) for i, b in sorted(self.brokers.items())}
        topics = {}
        me = self.broker_id
        for name, ta in self.topics.items():
            if self._hidden(name):
                continue
            parts = {}
            for p, ar in sorted(ta.partitions.items()):
                st = self.states.get((name, p))
                if st is None:
                    continue      # not initialized by the controller yet: not visible
                # this broker is offline only where it was told to stop replicating
                stopped = (name, p) in self._stopped and st.leader != me
                gone = self.offline.get((name, p), ())
                offline = tuple(r for r in ar if (r != me and (r not in brokers or r in gone))
                                or (r == me and stopped))
                parts[p] = model.PartitionState(p, st.leader, st.leader_epoch, ar, st.isr,
                                                offline, st.zk_version)
            if parts:
                topics[name] = model.Topic(name, ta.topic_id, parts, dict(self.configs.get(name, {})),
                                           name in INTERNAL_TOPICS)
        return model.ClusterMetadata(self.cluster_id, self.controller_id, brokers, topics, self.md.epoch)

    def _publish(self) -> None:
        new = self._build()
        if new == self.md:
            return
        self.md = replace(new, epoch=self.md.epoch + 1)
        for w in self.workers:
            w.apply_metadata(self.md)

    # ----------------------------------------------------------------- controllership
    async def _elect(self) -> None:
        if self._closing or self._session_lost or self.active:
            return
        try:
            data, stat = await self._z(self.zk.get_async, Z.CONTROLLER_EPOCH)
            epoch, version = int(data or b"0"), stat.version
        except NoNodeError:
            try:
                await self._z(self.zk.create_async, Z.CONTROLLER_EPOCH, b"0")
            except NodeExistsError:
                pass
            self._wake.set()
            return
        t = self.zk.transaction()
        t.create(Z.CONTROLLER, Z.controller_json(self.broker_id), ephemeral=True)
        t.set_data(Z.CONTROLLER_EPOCH, str(epoch + 1).encode(), version=version)
        results = await self._z(t.commit_async)
        if any(isinstance(r, Exception) for r in results):
            await self._load_controller()
            if self.controller_id == -1:
                self._wake.set()     # lost a race on /controller_epoch: try again
            return
        self.active = True
        self.controller_id = self.broker_id
        self.controller_epoch, self.epoch_zk_version = epoch + 1, results[1].version
        self.seen_controller_epoch = max(self.seen_controller_epoch, self.controller_epoch)
        self._outbox, self._conns = {}, {}
        self._del_acked, self._del_sent = {}, {}     # deletions restart with this term
        for b in self.brokers:       # a new controller tells every broker the whole state
            self._queue(b, set(self.states), {}, {
                k for k in self.states if k[0] in self.topics
                and b in self.topics[k[0]].partitions.get(k[1], ())})
        self.shutting_down = set()
        self._admin_dirty = True
        self._last_rebalance = time.monotonic()
        log.info("broker %d is the controller now (controller epoch %d)", self.broker_id,
                 self.controller_epoch)
        await self._load_controller()    # re-arm the watch on /controller
        self._wake.set()

    def _resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.controller_epoch)
        self.active = False
        self.shutting_down = set()

    def _unclean(self, topic: str) -> bool:
        v = self.configs.get(topic, {}).get("unclean.leader.election.enable")
        if v is not None:
            return v.lower() == "true"
        return bool(self._broker_cfg["unclean.leader.election.enable"])

    # ----------------------------------------------------------------- fenced writes
    def _fenced(self):
        """A ZooKeeper transaction whose first op checks /controller_epoch's version: the
        one this controller wrote when elected (a deposed controller's write fails), or on
        a broker that is not the controller the one it last read (a write planned on a
        view from before a controller change fails)."""
        t = self.zk.transaction()
        t.check(Z.CONTROLLER_EPOCH, self.epoch_zk_version if self.active else self.seen_epoch_zk_version)
        return t

    async def _commit(self, t) -> Optional[list]:
        """Commit a `_fenced` transaction: the results of its own ops (an exception in
        place of each failed one), or None when the epoch check failed (the active
        controller then resigns)."""
        results = await self._z(t.commit_async)
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            if self.active:
                log.warning("controller epoch %d is stale: resigning", self.controller_epoch)
                self._resign()
            return None
        return results[1:]

    async def _delete_fenced(self, paths) -> bool:
        """The active controller deletes znodes (children listed before their parents) in
        fenced transactions of at most MULTI_OPS deletes; False when one failed (nothing
        of that one applied) or this is not the active controller."""
        paths = list(paths)
        for i in range(0, len(paths), MULTI_OPS):
            if not self.active:
                return False
            t = self._fenced()
            for path in paths[i:i + MULTI_OPS]:
                t.delete(path)
            results = await self._commit(t)
            if results is None:
                return False
            errors = [(path, r) for path, r in zip(paths[i:], results)
                      if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if errors:
                log.info("deleting %s: %s", errors[0][0], type(errors[0][1]).__name__)
                return False
        return True

    async def _subtree(self, path: str) -> list:
        """`path` and every znode below it, children before parents; [] when missing."""
        try:
            children = await self._z(self.zk.get_children_async, path)
        except NoNodeError:
            return []
        below = await asyncio.gather(*(self._subtree(f"{path}/{c}") for c in children))
        return [x for sub in below for x in sub] + [path]

    async def _write_state(self, topic: str, p: int, leader: int, isr, old: Z.LeaderAndIsr) -> bool:
        """A fenced conditional write of a new leader/ISR (leader epoch + 1)."""
        t = self._fenced()
        new = self._state_op(t, topic, p, leader, isr, old)
        results = await self._commit(t)
        if results is None:
            return False
        if isinstance(results[0], Exception):
            await self._load_state(topic, p)      # someone changed it: plan again
            self._wake.set()
            return False
        self._state_written(topic, p, new, old, results[0])
        return True

    def _state_op(self, t, topic: str, p: int, leader: int, isr, old: Z.LeaderAndIsr) -> Z.LeaderAndIsr:
        """Add the conditional set of a new leader/ISR (leader epoch + 1) to transaction t."""
        new = Z.LeaderAndIsr(leader, old.leader_epoch + 1, tuple(isr), self.controller_epoch)
        t.set_data(Z.state_path(topic, p), Z.state_json(new), version=old.zk_version)
        return new

    def _state_written(self, topic: str, p: int, new: Z.LeaderAndIsr, old: Z.LeaderAndIsr, stat) -> None:
        self.states[(topic, p)] = replace(new, zk_version=stat.version)
        self._changed((topic, p))
        log.info("%s-%d: leader %d -> %d, isr %s -> %s, leader epoch %d", topic, p, old.leader,
                 new.leader, list(old.isr), list(new.isr), new.leader_epoch)

    async def _init_partition(self, topic: str, p: int, ar, live) -> None:
        candidates = [r for r in ar if r in live and r not in self.shutting_down]
        if not candidates:
            return          # stays new until a replica is alive (Kafka's NewPartition)
        isr = tuple(r for r in ar if r in live)
        state = Z.LeaderAndIsr(candidates[0], 0, isr, self.controller_epoch)
        t = self._fenced()
        for path in (f"{Z.topic_path(topic)}/partitions", Z.partition_path(topic, p)):
            if await self._z(self.zk.exists_async, path) is None:
                t.create(path, b"")
        t.create(Z.state_path(topic, p), Z.state_json(state))
        if await self._commit(t) is None:
            return
        await self._load_state(topic, p)
        self._changed((topic, p))

    async def _controller_tick(self) -> None:
        async with self._lock:
            if not self.active:
                return
            if self._admin_dirty:
                self._admin_dirty = False
                await self._handle_admin()
            await self._progress_deletions()
            live = set(self.brokers)
            self.shutting_down &= live
            for name, ta in list(self.topics.items()):
                if name in self.deleting:
                    continue              # Kafka elects nothing for a topic being deleted
                for p, ar in list(ta.partitions.items()):
                    if not self.active:
                        return
                    st = self.states.get((name, p))
                    if st is None:
                        await self._init_partition(name, p, ar, live)
                        continue
                    gone = self.offline.get((name, p))
                    choice = elections.plan(ar, st.leader, st.isr, live - gone if gone else live,
                                            self.shutting_down, self._unclean(name))
                    if choice is not None:
                        await self._write_state(name, p, choice[0], choice[1], st)
            await self._progress_reassignments()
            await self._maybe_rebalance()

    async def _maybe_rebalance(self) -> None:
        cfg = self._broker_cfg
        interval = cfg["leader.imbalance.check.interval.seconds"]
        if not cfg["auto.leader.rebalance.enable"] or time.monotonic() - self._last_rebalance < interval:
            return
        self._last_rebalance = time.monotonic()
        assignments = {(t, p): ar for t, ta in self.topics.items() if t not in self.deleting
                       for p, ar in ta.partitions.items()}
        leaders = {k: s.leader for k, s in self.states.items()}
        live = set(self.brokers) - self.shutting_down
        for b in sorted(live):
            ratio, keys = elections.imbalanced(assignments, leaders, b)
            if ratio * 100 > cfg["leader.imbalance.per.broker.percentage"]:
                log.info("leader imbalance of broker %d is %.0f%%: preferred elections", b, ratio * 100)
                for t, p in keys:
                    st = self.states.get((t, p))
                    choice = st and elections.preferred_leader(assignments[(t, p)], st.isr, live)
                    if choice:
                        await self._write_state(t, p, choice[0], choice[1], st)

    # ----------------------------------------------------------------- topic deletion
    async def _progress_deletions(self) -> None:
        """Kafka's TopicDeletionManager, one step per tick for each marked topic: the
        replicas that have not answered StopReplica(delete=true) get it (again after
        DELETE_RETRY_S; an offline one when it is back); once all answered, the topic's
        znodes and the request go. With delete.topic.enable=false the request is dropped."""
        enabled = self._broker_cfg["delete.topic.enable"]
        now = time.monotonic()
        for name in sorted(self.deleting):
            if not self.active:
                return
            if not enabled:
                log.info("topic deletion is disabled: dropping the request to delete %s", name)
                await self._delete_fenced([f"{Z.DELETE_TOPICS}/{name}"])
                continue
            ta = self.topics.get(name)
            parts = ta.partitions if ta is not None else {}
            pending = {r for ar in parts.values() for r in ar} - self._del_acked.get(name, set())
            for b in sorted(pending & set(self.brokers)):
                if now - self._del_sent.get((name, b), -DELETE_RETRY_S) >= DELETE_RETRY_S:
                    self._del_sent[(name, b)] = now
                    self._queue(b, set(), {(name, p): True for p, ar in parts.items() if b in ar})
            if pending:
                continue
            paths = await self._subtree(Z.topic_path(name)) + await self._subtree(Z.topic_config_path(name))
            if await self._delete_fenced(paths + [f"{Z.DELETE_TOPICS}/{name}"]):
                log.info("deleted topic %s", name)
                self._drop_topic(name)
                self.deleting.discard(name)
                self._del_acked.pop(name, None)
                for key in [k for k in self._del_sent if k[0] == name]:
                    del self._del_sent[key]

    def _deletion_answered(self, b: int, stop: dict, resp: dict) -> None:
        """A StopReplica response of broker b: the topics it deleted without error."""
        if resp.get("error_code"):
            return
        failed = {e["topic_name"] for e in resp.get("partition_errors") or () if e["error_code"]}
        for t in {t for (t, _), delete in stop.items() if delete} - failed:
            if t in self.deleting:
                self._del_acked.setdefault(t, set()).add(b)
                self._wake.set()

    async def _handle_admin(self) -> None:
        await self._load_deletions()          # the watch again; _progress_deletions acts
        # preferred replica elections requested through ZooKeeper
        stat = await self._z(self.zk.exists_async, Z.PREFERRED_ELECTION, self._watch)
        if stat is not None:
            try:
                data, _ = await self._z(self.zk.get_async, Z.PREFERRED_ELECTION)
                await self._elect_locked(0, Z.parse_partitions(data, Z.PREFERRED_ELECTION))
            except (NoNodeError, Z.ZkDataError) as e:
                log.warning("%s: %s", Z.PREFERRED_ELECTION, e)
            await self._delete_fenced([Z.PREFERRED_ELECTION])
        if not self.active:
            return
        # reassignments requested through ZooKeeper (kafka-reassign-partitions --zookeeper)
        stat = await self._z(self.zk.exists_async, Z.REASSIGN, self._watch)
        if stat is not None:
            try:
                data, _ = await self._z(self.zk.get_async, Z.REASSIGN)
                moves = Z.parse_reassignment(data)
                await self._reassign_locked([(t, p, r) for (t, p), r in moves.items()])
            except (NoNodeError, Z.ZkDataError) as e:
                log.warning("%s: %s", Z.REASSIGN, e)
            await self._delete_fenced([Z.REASSIGN])
        if not self.active:
            return
        # ISR change notifications: our cache watches every state znode already
        for child in await self._z(self.zk.get_children_async, Z.ISR_CHANGES, self._watch):
            path = f"{Z.ISR_CHANGES}/{child}"
            try:
                data, _ = await self._z(self.zk.get_async, path)
                for t, p in Z.parse_partitions(data, path):
                    if t in self.topics:
                        await self._load_state(t, p)
            except (NoNodeError, Z.ZkDataError):
                pass
            if not self.active:
                return
            await self._delete_fenced([path])

    # ----------------------------------------------------------------- controller -> broker requests
    # The active controller tells the brokers about every leader/ISR change over the Kafka
    # protocol as Kafka's ControllerChannelManager does: LeaderAndIsr (v5) to the replicas
    # of the changed partitions, UpdateMetadata (v7) to every live broker, StopReplica (v3)
    # with delete to the replicas of deleted topics (their answers drive the deletion) and
    # without to a broker in controlled shutdown. One sender task per broker drains that
    # broker's outbox (coalesced), with a 5 s request timeout; a broker that does not
    # answer gets everything again with the next change. The receiving broker checks the
    # epochs (`controller_request`) and re-reads the named znodes (ZooKeeper stays the
    # source of truth; its watches deliver the same changes).
    def _changed(self, key) -> None:
        ar = self.topics[key[0]].partitions.get(key[1], ()) if key[0] in self.topics else ()
        for b in self.brokers:
            self._queue(b, {key}, {}, {key} if b in ar else set())

    def _queue(self, b: int, changed: set, stop: dict, lai: set = frozenset(),
               sent: Optional[asyncio.Future] = None) -> None:
        """Queue for broker b: UpdateMetadata of `changed`, LeaderAndIsr of `lai`,
        StopReplica of `stop` ({(topic, partition): delete}); `sent` gets True once
        broker b answered them, False when that failed."""
        if not self.active or self.loop is None:
            return
        box = self._outbox.setdefault(b, {"changed": set(), "lai": set(), "stop": {}, "sent": []})
        box["changed"] |= changed
        box["lai"] |= lai
        for key, delete in stop.items():
            box["stop"][key] = box["stop"].get(key, False) or delete
        if sent is not None:
            box["sent"].append(sent)
        task = self._senders.get(b)
        if task is None or task.done():
            self._senders[b] = self.loop.create_task(self._send_loop(b))

    async def _send_loop(self, b: int) -> None:
        from workers.kafka_client import KafkaConnection
        while self.active and b in self._outbox:
            box = self._outbox.pop(b)
            info = self.brokers.get(b)
            if info is None:
                self._settle(box, False)
                return
            try:
                conn = self._conns.get(b)
                if conn is None or conn.closed:
                    conn = self._conns[b] = await KafkaConnection.connect(
                        info.host, info.port, client_id=f"mpbroker-controller-{self.broker_id}",
                        timeout_ms=5000)
                head = {"controller_id": self.broker_id, "controller_epoch": self.controller_epoch,
                        "broker_epoch": info.epoch}
                if box["lai"]:
                    body = dict(head, type=0, topic_states=self._topic_states(box["lai"], True),
                                live_leaders=self._live_leaders(box["lai"]))
                    resp = await conn.request(4, 5, body)
                    self._check_reply(b, "LeaderAndIsr", resp)
                if box["changed"]:
                    body = dict(head, topic_states=self._topic_states(box["changed"], False),
                                live_brokers=[{"id": x.id, "endpoints": [
                                    {"port": x.port, "host": x.host, "listener": "PLAINTEXT",
                                     "security_protocol": 0}], "rack": x.rack}
                                    for x in self.brokers.values()])
                    resp = await conn.request(6, 7, body)
                    self._check_reply(b, "UpdateMetadata", resp)
                if box["stop"]:
                    resp = await conn.request(5, 3, dict(head, topic_states=self._stop_states(box["stop"])))
                    self._check_reply(b, "StopReplica", resp)
                    self._deletion_answered(b, box["stop"], resp)
            except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                log.info("controller request to broker %d failed: %s", b, e)
                self._settle(box, False)
                for key in [k for k in self._del_sent if k[1] == b]:
                    del self._del_sent[key]     # deletions: again with the next tick
                old = self._conns.pop(b, None)
                if old is not None:
                    await old.close()
                return
            self._settle(box, True)

    @staticmethod
    def _settle(box: dict, ok: bool) -> None:
        for fut in box["sent"]:
            if not fut.done():
                fut.set_result(ok)

    @staticmethod
    def _check_reply(b: int, what: str, resp: dict) -> None:
        if resp.get("error_code"):
            log.warning("%s to broker %d: error %d", what, b, resp["error_code"])

    def _stop_states(self, stop: dict) -> list:
        """StopReplica v3 topic_states; the leader epoch is -2 for a deletion (Kafka's
        EpochDuringDelete), else the current one."""
        by_topic: Dict[str, list] = {}
        for (t, p), delete in sorted(stop.items()):
            st = self.states.get((t, p))
            epoch = -2 if delete else (st.leader_epoch if st is not None else -1)
            by_topic.setdefault(t, []).append(
                {"partition_index": p, "leader_epoch": epoch, "delete_partition": delete})
        return [{"topic_name": t, "partition_states": ps} for t, ps in by_topic.items()]

    def _topic_states(self, keys, leader_and_isr: bool) -> list:
        by_topic: Dict[str, list] = {}
        for t, p in sorted(keys):
            ta, st = self.topics.get(t), self.states.get((t, p))
            if ta is None or st is None or p not in ta.partitions:
                continue
            ar = list(ta.partitions[p])
            ps = {"partition_index": p, "controller_epoch": st.controller_epoch, "leader": st.leader,
                  "leader_epoch": st.leader_epoch, "isr": list(st.isr), "replicas": ar}
            if leader_and_isr:
                ps.update(partition_epoch=st.zk_version,
                          adding_replicas=list((ta.adding or {}).get(p, ())),
                          removing_replicas=list((ta.removing or {}).get(p, ())))
            else:
                gone = self.offline.get((t, p), ())
                ps.update(zk_version=st.zk_version,
                          offline_replicas=[r for r in ar if r not in self.brokers or r in gone])
            by_topic.setdefault(t, []).append(ps)
        return [{"topic_name": t, "topic_id": self.topics[t].topic_id, "partition_states": ps}
                for t, ps in by_topic.items()]

    def _live_leaders(self, keys) -> list:
        leaders = {self.states[k].leader for k in keys if k in self.states}
        return [{"broker_id": b.id, "host_name": b.host, "port": b.port}
                for i, b in self.brokers.items() if i in leaders]

    async def controller_request(self, api_key: int, version: int, body: dict) -> dict:
        """LeaderAndIsr (4) / StopReplica (5) / UpdateMetadata (6) received by this broker:
        STALE_CONTROLLER_EPOCH for an epoch older than the newest this broker knows,
        STALE_BROKER_EPOCH for a broker epoch older than this registration's; otherwise
        the named partitions (and, for UpdateMetadata, the brokers) are re-read from
        ZooKeeper and the view is pushed. The response body for `version`."""
        epoch = body.get("controller_epoch", -1)
        broker_epoch = body.get("broker_epoch", -1)
        if epoch > self.seen_controller_epoch and not self._session_lost:
            await self._load_controller()       # maybe a controller we have not seen yet
        if epoch < self.seen_controller_epoch:
            err = ErrorCode.STALE_CONTROLLER_EPOCH
        elif broker_epoch not in (-1, None) and broker_epoch < self.broker_epoch:
            err = ErrorCode.STALE_BROKER_EPOCH
        else:
            err = ErrorCode.NONE
            self.seen_controller_epoch = max(self.seen_controller_epoch, epoch)
        parts = broker_requests.partitions(api_key, version, body)
        errors = {}
        if err == ErrorCode.NONE and not self._session_lost:
            if api_key == 6:
                await self._load_brokers()
            if api_key == 5:
                deletes = broker_requests.stop_deletes(version, body)
                if any(deletes.values()):
                    await self._load_deletions()  # delete: the topic leaves our view
                self._stop_replicas(deletes)
            if any(t not in self.topics for t, _, _ in parts):
                await self._load_topics()
            known = [(t, p) for t, p, _ in parts if t in self.topics and p in self.topics[t].partitions]
            await asyncio.gather(*(self._load_state(t, p) for t, p in known))
            for t, p, _ in parts:
                errors[(t, p)] = ErrorCode.NONE if (t, p) in known or api_key == 5 \
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            self._publish()
            log.info("%s v%d from controller %d (epoch %d): %d partitions",
                     broker_requests.NAMES[api_key], version,
                     body.get("controller_id", -1), epoch, len(parts))
        else:
            log.warning("refused %s from controller %d epoch %d (known epoch %d, broker epoch %s/%d): %d",
                        broker_requests.NAMES[api_key], body.get("controller_id", -1), epoch, self.seen_controller_epoch,
                        broker_epoch, self.broker_epoch, err)
            errors = {(t, p): err for t, p, _ in parts}
        return broker_requests.response(api_key, version, parts, errors, err)

    def _stop_replicas(self, deletes: dict) -> None:
        """StopReplica without delete (controlled shutdown): this broker stops following
        those partitions for the rest of its run (`_build` shows it offline there)."""
        for key, delete in deletes.items():
            st = self.states.get(key)
            if not delete and (st is None or st.leader != self.broker_id) and key not in self._stopped:
                self._stopped.add(key)
                log.info("stopping the replica of %s-%d (StopReplica)", *key)

    # ----------------------------------------------------------------- reassignment (KIP-455)
    @staticmethod
    def _reassignment_of(ta: Z.TopicAssignment, p: int):
        """(RS, target, original) of partition p; target is None when nothing is ongoing."""
        rs = ta.partitions[p]
        adding, removing = (ta.adding or {}).get(p, ()), (ta.removing or {}).get(p, ())
        if not adding and not removing:
            return rs, None, rs
        return rs, tuple(r for r in rs if r not in removing), tuple(r for r in rs if r not in adding)

    async def _write_assignment(self, topic: str, changes: Dict[int, tuple], states=None) -> bool:
        """changes: p -> (RS, adding, removing); a fenced conditional write of the topic
        znode, in the same transaction as the new leader/ISR of `states` ({p: (leader,
        isr, old state)}): a reassignment ends, or is cancelled, at once, so no leader
        ever sees the smaller ISR with the larger replica set (and adds a leaving
        replica back)."""
        ta = self.topics[topic]
        parts, adding, removing = dict(ta.partitions), dict(ta.adding or {}), dict(ta.removing or {})
        for p, (rs, add, rem) in changes.items():
            parts[p] = tuple(rs)
            adding.pop(p, None)
            removing.pop(p, None)
            if add:
                adding[p] = tuple(add)
            if rem:
                removing[p] = tuple(rem)
        t = self._fenced()
        t.set_data(Z.topic_path(topic), Z.topic_json(ta.topic_id, parts, adding, removing),
                   version=self.topic_versions.get(topic, -1))
        states = states or {}
        new = {p: self._state_op(t, topic, p, *x) for p, x in states.items()}
        results = await self._commit(t)
        ok = results is not None and not any(isinstance(r, Exception) for r in results)
        if not ok:
            await asyncio.gather(*(self._load_state(topic, p) for p in states))
            await self._load_topic(topic)
            return False
        # the cache at once (requests served meanwhile see it); the watch reloads it too
        self.topics[topic] = Z.TopicAssignment(ta.topic_id, parts, adding, removing)
        self.topic_versions[topic] = results[0].version
        for (p, n), stat in zip(new.items(), results[1:]):
            self._state_written(topic, p, n, states[p][2], stat)
        return True

    async def _reassign_locked(self, moves) -> list:
        """moves: [(topic, p, replicas | None)] -> [(topic, p, code, message)]."""
        out, per_topic = [], {}
        known = set(self.brokers)
        for t, p, target in moves:
            ta = self.topics.get(t) if t not in self.deleting else None
            if ta is None or p not in ta.partitions or (t, p) not in self.states:
                out.append((t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "The partition does not exist."))
                continue
            rs, ongoing, original = self._reassignment_of(ta, p)
            if target is None:
                if ongoing is None:
                    out.append((t, p, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                f"Cannot cancel a reassignment of {t}-{p}: none is in progress."))
                    continue
                per_topic.setdefault(t, {})[p] = ("cancel", original)
                out.append((t, p, ErrorCode.NONE, None))
                continue
            target = tuple(target)
            if not target or len(set(target)) != len(target):
                out.append((t, p, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"The replica assignment {list(target)} is empty or has duplicates."))
                continue
            unknown = sorted(set(target) - known - set(rs))
            if unknown or any(r < 0 for r in target):
                out.append((t, p, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"The proposed assignment contains non-live brokers: {unknown}"))
                continue
            per_topic.setdefault(t, {})[p] = ("move", original, target)
            out.append((t, p, ErrorCode.NONE, None))
        for t, parts in per_topic.items():
            changes, states = {}, {}
            for p, op in parts.items():
                if op[0] == "cancel":
                    original = op[1]
                    changes[p] = (original, (), ())
                    st = self.states[(t, p)]
                    live = set(self.brokers) - self.shutting_down
                    isr = tuple(r for r in st.isr if r in original)
                    leader = st.leader
                    if leader not in original:
                        choice = elections.reassignment_leader(original, isr, live)
                        leader = choice[0] if choice else -1
                    if (leader, isr) != (st.leader, st.isr):
                        states[p] = (leader, isr or (st.isr[:1]), st)
                else:
                    original, target = op[1], op[2]
                    rs = target + tuple(r for r in original if r not in target)
                    changes[p] = (rs, tuple(r for r in target if r not in original),
                                  tuple(r for r in original if r not in target))
            if not await self._write_assignment(t, changes, states):
                for i, (tt, p, code, msg) in enumerate(out):
                    if tt == t and p in parts and code == ErrorCode.NONE:
                        out[i] = (tt, p, ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                  f"Topic {t} changed concurrently; retry.")
        self._wake.set()
        return out

    async def _progress_reassignments(self) -> None:
        """Finish the reassignments whose target replicas are all in the ISR: leader from
        the target (reassignment election) if needed, ISR limited to the target, AR =
        target, adding/removing cleared."""
        live = set(self.brokers) - self.shutting_down
        for t, ta in list(self.topics.items()):
            if t in self.deleting:
                continue
            done, states = {}, {}
            for p in set(ta.adding or {}) | set(ta.removing or {}):
                if p not in ta.partitions:
                    continue
                rs, target, original = self._reassignment_of(ta, p)
                st = self.states.get((t, p))
                if target is None or st is None or not set(target) <= set(st.isr):
                    continue
                leader = st.leader
                if leader not in target or leader not in live:
                    choice = elections.reassignment_leader(target, st.isr, live)
                    if choice is None:
                        continue
                    leader = choice[0]
                isr = tuple(r for r in st.isr if r in target)
                if (leader, isr) != (st.leader, st.isr):
                    states[p] = (leader, isr, st)
                done[p] = (target, (), ())
            if done and await self._write_assignment(t, done, states):
                log.info("reassignment of %s partitions %s completed", t, sorted(done))

    async def alter_partition_reassignments(self, moves):
        """AlterPartitionReassignments -> (error_code, message, [(topic, p, code, message)])."""
        if not self.active:
            return ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.", []
        async with self._lock:
            out = await self._reassign_locked(moves)
        self._publish()
        return ErrorCode.NONE, None, out

    async def list_partition_reassignments(self, partitions):
        """-> (error_code, message, [(topic, p, replicas, adding, removing)]) of the ongoing ones."""
        if not self.active:
            return ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.", []
        out = []
        keys = partitions if partitions is not None else [
            (t, p) for t, ta in sorted(self.topics.items()) for p in sorted(ta.partitions)]
        for t, p in keys:
            ta = self.topics.get(t)
            if ta is None or p not in ta.partitions:
                continue
            rs = ta.partitions[p]
            adding, removing = (ta.adding or {}).get(p, ()), (ta.removing or {}).get(p, ())
            if adding or removing:
                out.append((t, p, list(rs), list(adding), list(removing)))
        return ErrorCode.NONE, None, out

    # ----------------------------------------------------------------- controller APIs
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1):
        """ControlledShutdown on the active controller -> (error_code, [(topic, partition)]
        still led by the broker)."""
        if not self.active:
            return ErrorCode.NOT_CONTROLLER, []
        b = self.brokers.get(broker_id)
        if b is None:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        if broker_epoch not in (-1, None) and broker_epoch != b.epoch:
            return ErrorCode.STALE_BROKER_EPOCH, []
        async with self._lock:
            self.shutting_down.add(broker_id)
            live = set(self.brokers)
            followed = {}
            for name, ta in list(self.topics.items()):
                for p, ar in ta.partitions.items():
                    st = self.states.get((name, p))
                    if st is None or broker_id not in ar or len(ar) < 2 or not self.active \
                            or name in self.deleting:
                        continue
                    if st.leader == broker_id:
                        choice = elections.controlled_shutdown_leader(ar, st.isr, live, self.shutting_down)
                        if choice is not None:
                            await self._write_state(name, p, choice[0], choice[1], st)
                        continue
                    if broker_id in st.isr and len(st.isr) > 1:
                        await self._write_state(name, p, st.leader,
                                                tuple(r for r in st.isr if r != broker_id), st)
                    followed[(name, p)] = False
            stopped = None
            if followed:   # its replica fetchers stop, so no leader adds it back to an ISR
                stopped = self.loop.create_future()
                self._queue(broker_id, set(), followed, sent=stopped)
            remaining = sorted((t, p) for (t, p), st in self.states.items()
                               if st.leader == broker_id and t not in self.deleting
                               and len(self.topics[t].partitions.get(p, ())) > 1)
        self._publish()
        if stopped is not None:     # answered once the broker stopped its followers (bounded)
            try:
                await asyncio.wait_for(stopped, 5)
            except asyncio.TimeoutError:
                log.info("StopReplica to broker %d not answered yet", broker_id)
        log.info("controlled shutdown of broker %d: %d partitions still led", broker_id, len(remaining))
        return ErrorCode.NONE, remaining

    async def request_controlled_shutdown(self) -> bool:
        """This broker is stopping: ask the active controller to move its leaderships
        (ControlledShutdown v3), `controlled.shutdown.max.retries` attempts."""
        from workers.kafka_client import KafkaConnection
        cfg = self._broker_cfg
        retries = max(1, cfg["controlled.shutdown.max.retries"])
        backoff = cfg["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(1, retries + 1):
            code, remaining = ErrorCode.NOT_CONTROLLER, []
            try:
                cid = self.controller_id
                if cid == self.broker_id and self.active:
                    code, remaining = await self.controlled_shutdown(self.broker_id, self.broker_epoch)
                elif cid in self.brokers:
                    b = self.brokers[cid]
                    conn = await KafkaConnection.connect(
                        b.host, b.port, client_id=f"mpbroker-{self.broker_id}-controlled-shutdown",
                        timeout_ms=30000)
                    try:
                        resp = await conn.request(CONTROLLED_SHUTDOWN, 3, {
                            "broker_id": self.broker_id, "broker_epoch": self.broker_epoch})
                    finally:
                        await conn.close()
                    code = resp["error_code"]
                    remaining = [(r["topic_name"], r["partition_index"])
                                 for r in resp["remaining_partitions"]]
            except (OSError, ConnectionError, asyncio.TimeoutError, KazooException) as e:
                log.warning("controlled shutdown attempt %d: %s", attempt, e)
            if code == ErrorCode.NONE and not remaining:
                log.info("controlled shutdown of broker %d succeeded", self.broker_id)
                return True
            log.warning("controlled shutdown attempt %d/%d: error %d, %d partitions still led",
                        attempt, retries, code, len(remaining))
            if attempt < retries:
                await asyncio.sleep(backoff)
        log.warning("controlled shutdown of broker %d failed: proceeding to an unclean shutdown",
                    self.broker_id)
        return False

    async def elect_leaders(self, election_type: int, partitions):
        """ElectLeaders -> (error_code, [(topic, partition, error_code, message)]).
        election_type 0 preferred, 1 unclean; partitions None: every partition."""
        if not self.active:
            return ErrorCode.NOT_CONTROLLER, [
                (t, p, ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.")
                for t, p in (partitions or [])]
        async with self._lock:
            out = await self._elect_locked(election_type, partitions)
        self._publish()
        return ErrorCode.NONE, out

    async def _elect_locked(self, election_type: int, partitions):
        live = set(self.brokers) - self.shutting_down
        if partitions is None:
            partitions = [(t, p) for t, ta in self.topics.items() if t not in self.deleting
                          for p in ta.partitions if (t, p) in self.states and (
                              self.states[(t, p)].leader != ta.partitions[p][0] if election_type == 0
                              else self.states[(t, p)].leader not in live)]
        out = []
        for t, p in partitions:
            if t in self.deleting:
                out.append((t, p, ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted"))
                continue
            ar = self.topics[t].partitions.get(p) if t in self.topics else None
            st = self.states.get((t, p))
            if ar is None or st is None:
                out.append((t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "The partition does not exist."))
                continue
            if election_type == 0:
                if st.leader == ar[0]:
                    out.append((t, p, ErrorCode.ELECTION_NOT_NEEDED,
                                "Leader election not needed for topic partition."))
                    continue
                choice = elections.preferred_leader(ar, st.isr, live)
                err = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                strategy = "PreferredReplicaPartitionLeaderElectionStrategy"
            else:
                if st.leader in live:
                    out.append((t, p, ErrorCode.ELECTION_NOT_NEEDED,
                                "Leader election not needed for topic partition."))
                    continue
                choice = elections.offline_leader(ar, st.isr, live, unclean=True)
                err = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                strategy = "OfflinePartitionLeaderElectionStrategy"
            if choice is None or not await self._write_state(t, p, choice[0], choice[1], st):
                out.append((t, p, err, f"Failed to elect leader for partition {t}-{p} under strategy "
                                       f"{strategy}"))
            else:
                out.append((t, p, ErrorCode.NONE, None))
        return out

    async def alter_partition(self, topic: str, partition: int, leader_id: int, leader_epoch: int,
                              partition_epoch: int, new_isr):
        """A leader changes its ISR (see docs/INTERFACES.md "Cluster mode")."""
        key = (topic, partition)
        ta = self.topics.get(topic)
        if ta is None or partition not in ta.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        await self._load_state(topic, partition)      # the current version, not a cached one
        st = self.states.get(key)
        if st is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        self._publish()
        current = self.md.topics[topic].partitions.get(partition) if topic in self.md.topics else None
        if leader_id != st.leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, current
        if leader_epoch != st.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, current
        if partition_epoch != st.zk_version:
            return ErrorCode.INVALID_UPDATE_VERSION, current
        new_isr = tuple(new_isr)
        ar = ta.partitions[partition]
        if leader_id not in new_isr or not set(new_isr) <= set(ar) or len(set(new_isr)) != len(new_isr):
            return ErrorCode.INVALID_REQUEST, current
        # KIP-841: the ISR only grows by brokers that are registered and not shutting down
        if any(r not in self.brokers or r in self.shutting_down for r in set(new_isr) - set(st.isr)):
            return ErrorCode.INELIGIBLE_REPLICA, current
        new = replace(st, isr=new_isr)
        try:
            stat = await self._z(self.zk.set_async, Z.state_path(topic, partition), Z.state_json(new),
                                 version=st.zk_version)
        except BadVersionError:
            await self._load_state(topic, partition)
            self._publish()
            cur = self.md.topics.get(topic)
            return ErrorCode.INVALID_UPDATE_VERSION, cur and cur.partitions.get(partition)
        except NoNodeError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        self.states[key] = replace(new, zk_version=stat.version)
        try:
            await self._z(self.zk.create_async, f"{Z.ISR_CHANGES}/isr_change_",
                          Z.partitions_json([key]), sequence=True)
        except KazooException as e:
            log.warning("isr change notification for %s-%d: %s", topic, partition, e)
        log.info("%s-%d: isr %s -> %s (leader %d, epoch %d)", topic, partition, list(st.isr),
                 list(new_isr), leader_id, leader_epoch)
        self._publish()
        return ErrorCode.NONE, self.md.topics[topic].partitions[partition]

    # ----------------------------------------------------------------- topics
    async def _wait_visible(self, names_counts: Dict[str, int], timeout_ms: int) -> Set[str]:
        """Wait until each topic shows its partition count with leaders; the names that did."""
        deadline = time.monotonic() + max(0, min(timeout_ms, 60000)) / 1000

        def ok(name, count):
            t = self.md.topics.get(name)
            return t is not None and len(t.partitions) >= count and \
                all(s.leader >= 0 for s in t.partitions.values())
        while True:
            done = {n for n, c in names_counts.items() if ok(n, c)}
            if len(done) == len(names_counts) or time.monotonic() >= deadline:
                return done
            self._dirty.add(Z.TOPICS)
            self._wake.set()
            await asyncio.sleep(0.05)

    async def _write_topic(self, name: str, topic: model.Topic) -> None:
        """Config first, then the assignment (what the controller and brokers watch)."""
        if topic.configs:
            try:
                await self._z(self.zk.create_async, Z.topic_config_path(name),
                              Z.config_json(topic.configs), makepath=True)
            except NodeExistsError:
                await self._z(self.zk.set_async, Z.topic_config_path(name), Z.config_json(topic.configs))
        await self._z(self.zk.create_async, Z.topic_path(name),
                      Z.topic_json(topic.topic_id, topic.assignment()), makepath=True)

    def _view_for_create(self) -> model.ClusterMetadata:
        """The view with every known topic (also those not yet initialized) for validation."""
        md = self.md
        topics = dict(md.topics)
        for name, ta in self.topics.items():
            if name not in topics:
                topics[name] = model.Topic(name, ta.topic_id, {
                    p: model.PartitionState(p, -1, 0, ar, ()) for p, ar in ta.partitions.items()})
        return replace(md, topics=topics)

    async def create_topics(self, specs, validate_only, timeout_ms, quota=None):
        q = self._quota(quota)
        results, created = [], {}
        if self._requested_partitions(specs) > model.MAX_PARTITIONS_PER_REQUEST:
            for s in specs:
                res = self._create_result(s["name"])
                res["error_code"] = ErrorCode.POLICY_VIOLATION
                res["error_message"] = model.EXCESSIVE_PARTITIONS_MESSAGE
                results.append(res)
            return self._results(results, q)
        batch = model.TopicBatch(self._view_for_create(), self._limits())
        for s in specs:
            res = self._create_result(s["name"])
            try:
                configs = self._check_create_spec(s)
                if await self._z(self.zk.exists_async, f"{Z.DELETE_TOPICS}/{s['name']}") is not None:
                    raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                        f"Topic '{s['name']}' is marked for deletion.")
                def admit(n, configs=configs):
                    # after the model's checks (their errors come first), before counting
                    configmod.effective_topic_config(self._broker_cfg, configs)
                    return validate_only or q.try_record(n)
                t = self._create_in(batch, s, configs, admit)
                if not validate_only:
                    try:
                        await self._write_topic(t.name, t)
                    except NodeExistsError:
                        raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                            f"Topic '{t.name}' already exists.") from None
                    created[t.name] = len(t.partitions)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            except configmod.ConfigError as e:
                res["error_code"], res["error_message"] = ErrorCode.INVALID_CONFIG, str(e)
            else:
                self._fill_created(res, t)
            results.append(res)
        if created and timeout_ms > 0:
            done = await self._wait_visible(created, timeout_ms)
            for res in results:
                if res["name"] in created and res["name"] not in done:
                    res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                    res["error_message"] = "Timed out waiting for the topic's partitions to get leaders."
        return self._results(results, q)

    async def ensure_internal_topic(self, name: str) -> None:
        """Created on first use with the configured replication factor; while fewer brokers
        are alive than that, nothing is created (FindCoordinator answers
        COORDINATOR_NOT_AVAILABLE), as Kafka does."""
        if name in self.md.topics:
            return
        if name not in self.topics:
            n, rf, configs = internal_topic_spec(self.cfg, name)
            if len(self.brokers) < rf:
                log.info("not creating %s: %d live brokers, its replication factor is %d", name,
                         len(self.brokers), rf)
                return
            md = model.create_topic(self._view_for_create(), name, n, rf, None, configs,
                                    **self._topic_defaults())
            try:
                await self._write_topic(name, md.topics[name])
            except NodeExistsError:
                pass
            count = n
        else:
            count = len(self.topics[name].partitions)
        await self._wait_visible({name: count}, 15000)

    async def delete_topics(self, targets, timeout_ms, quota=None):
        q = self._quota(quota)
        if not self._broker_cfg["delete.topic.enable"]:
            return self._results([{"name": n, "topic_id": tid or bytes(16),
                                   "error_code": ErrorCode.TOPIC_DELETION_DISABLED,
                                   "error_message": "Topic deletion is disabled."} for n, tid in targets], q)
        results, pending = [], []
        md = self._view_for_create()
        for name, topic_id in targets:
            res = {"name": name, "topic_id": topic_id or bytes(16), "error_code": 0, "error_message": None}
            try:
                if name is not None and topic_id not in (None, bytes(16)):
                    raise MetadataError(ErrorCode.INVALID_REQUEST,
                                        "Topic name and topic id cannot both be specified.")
                t = md.topic(name) if name is not None else md.topic_by_id(topic_id)
                res["name"], res["topic_id"] = t.name, t.topic_id
                if not q.try_record(len(t.partitions)):
                    raise MetadataError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_MESSAGE)
                try:
                    await self._z(self.zk.create_async, f"{Z.DELETE_TOPICS}/{t.name}", b"", makepath=True)
                except NodeExistsError:
                    pass
                pending.append(t.name)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            results.append(res)
        deadline = time.monotonic() + max(0, min(timeout_ms, 60000)) / 1000
        while pending and time.monotonic() < deadline:
            self._dirty |= {Z.TOPICS, Z.DELETE_TOPICS}
            self._wake.set()
            await asyncio.sleep(0.05)
            pending = [n for n in pending if not self._deletion_visible(n)]
        for res in results:
            if res["name"] in pending and res["error_code"] == 0 and timeout_ms > 0:
                res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                res["error_message"] = "Timed out waiting for the topic deletion."
        return self._results(results, q)

    def _deletion_visible(self, name: str) -> bool:
        """DeleteTopics is answered once the topic left this broker's view and its znode
        is gone, or, while a replica is offline, once it left the view (Kafka answers when
        the metadata no longer has it; the deletion then waits for that replica)."""
        if name in self.md.topics:
            return False
        ta = self.topics.get(name)
        return ta is None or any(r not in self.brokers for ar in ta.partitions.values() for r in ar)

    async def create_partitions(self, specs, validate_only, timeout_ms, quota=None):
        q = self._quota(quota)
        results, grown = [], {}
        seen = set()
        growth = model.PartitionGrowth(self._view_for_create(), self._limits())
        for s in specs:
            res = {"name": s["name"], "error_code": 0, "error_message": None}
            try:
                if s["name"] in seen:
                    raise MetadataError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
                seen.add(s["name"])
                if s["name"] in self.deleting:
                    raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                        f"The topic {s['name']} is queued for deletion.")
                t = growth.grow(s["name"], s["count"], s["assignments"],
                                admit=None if validate_only else q.try_record)
                if not validate_only:
                    await self._write_partitions(t)
                    grown[t.name] = len(t.partitions)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            results.append(res)
        if grown and timeout_ms > 0:
            await self._wait_visible(grown, timeout_ms)
        return self._results(results, q)

    async def _write_partitions(self, t: model.Topic) -> None:
        """The grown assignment: fenced, conditional on the topic znode's version."""
        txn = self._fenced()
        txn.set_data(Z.topic_path(t.name), Z.topic_json(t.topic_id, t.assignment()),
                     version=self.topic_versions.get(t.name, -1))
        results = await self._commit(txn)
        if results is None:
            await self._load_controller()
            raise MetadataError(ErrorCode.NOT_CONTROLLER,
                                "The controller changed while adding partitions; retry.")
        if isinstance(results[0], BadVersionError):
            raise MetadataError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                f"Topic {t.name} changed concurrently; retry.")
        if isinstance(results[0], Exception):
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {t.name} is gone.")
        await self._load_topic(t.name)

    async def alter_configs(self, resources, incremental, validate_only):
        out = []
        for rtype, rname, ops in resources:
            try:
                if rtype == 2:
                    new_md = self._alter_topic(self._view_for_create(), rname, ops, incremental,
                                               validate_only)
                    if not validate_only:
                        cfg = dict(new_md.topics[rname].configs)
                        path = Z.topic_config_path(rname)
                        try:
                            await self._z(self.zk.set_async, path, Z.config_json(cfg))
                        except NoNodeError:
                            await self._z(self.zk.create_async, path, Z.config_json(cfg), makepath=True)
                        await self._z(self.zk.create_async, f"{Z.CONFIG_CHANGES}/config_change_",
                                      Z.config_change_json(f"topics/{rname}"), sequence=True)
                        self.configs[rname] = cfg
                elif rtype == 4:
                    self._alter_broker(rname, ops, incremental, validate_only)
                else:
                    raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
            except MetadataError as e:
                out.append((rtype, rname, e.code, e.message))
            except configmod.ConfigError as e:
                out.append((rtype, rname, ErrorCode.INVALID_CONFIG, str(e)))
            else:
                out.append((rtype, rname, 0, None))
        self._publish()
        return out

    async def allocate_producer_id(self) -> int:
        async with self._pid_lock:          # one block fetch at a time
            if self._pid_next >= self._pid_end:
                await self._next_producer_id_block()
            pid = self._pid_next
            self._pid_next += 1
            return pid

    async def _next_producer_id_block(self) -> None:
        """Claim the next block of /latest_producer_id_block (CAS on its version)."""
        while True:
            data, stat = await self._z(self.zk.get_async, Z.PRODUCER_ID_BLOCK)
            start = Z.next_producer_id_block_start(data)
            try:
                await self._z(self.zk.set_async, Z.PRODUCER_ID_BLOCK,
                              Z.producer_id_block_json(self.broker_id, start), version=stat.version)
                break
            except BadVersionError:
                continue
        self._pid_next, self._pid_end = start, start + Z.PRODUCER_ID_BLOCK_SIZE
