"""`ZkController`: the worker-facing controller API over ZooKeeper, composed of the parts
of this package (see its `__init__` for who owns what). This module wires them, boots
(the broker's registration `/brokers/ids/<id>`), runs the controller loop (reload the
dirty znodes, publish the view, run for controller, and, when active, one controller
tick), and handles session expiry: stop acting as controller at once (kazoo LOST); on
the new session, register again, reload every watch, run for controller again.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import replace
from typing import Optional, Tuple

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from mpbroker import config as configmod
from mpbroker.controller import client_quotas, limits, zkdata
from mpbroker.controller.zk import client_quotas as zk_client_quotas
from mpbroker.controller.config_ops import DynamicBrokerConfigs
from mpbroker.controller.zk.admin import TopicAdmin
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.channel import BrokerChannel
from mpbroker.controller.zk.controllership import Controllership
from mpbroker.controller.zk.deletion import TopicDeletion
from mpbroker.controller.zk.isr import IsrChanges
from mpbroker.controller.zk.reassignment import Reassignments
from mpbroker.controller.zk.scram_users import ZkScramUsers
from mpbroker.controller.zk.session import ZkSession
from mpbroker.controller.worker_facing import WorkerFacing
from mpbroker.metadata import model
from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TICK_S = 1.0              # the controller loop runs at least this often
RETRY_S = 0.2             # after a failed loop pass
REGISTER_RETRY_S = 0.5    # while our previous process's registration is still there


class ZkController(WorkerFacing):
    """The worker-facing controller API over ZooKeeper (see the package docstring)."""

    def __init__(self, cfg: configmod.BrokerConfig, advertised: Tuple[str, int] = ("127.0.0.1", 9092)):
        self.cfg = cfg
        self.log_dir = cfg.log_dirs[0]
        os.makedirs(self.log_dir, exist_ok=True)
        self.advertised = advertised
        self.session = ZkSession(cfg)
        self.zk = self.session.zk
        try:
            self.session.ensure_paths()
            self.cluster_id = self.session.cluster_id()
            self.broker_id = self.session.claim_broker_id(cfg, self.cluster_id)
        except configmod.ConfigError:
            self.session.close()
            raise
        self.md = model.ClusterMetadata(self.cluster_id)
        self.workers: list = []
        self.dynamic = DynamicBrokerConfigs(self.log_dir)
        self._broker_cfg = self.dynamic.over(cfg)
        self.broker_epoch = -1
        self._closing = False
        self._session_lost = False
        self._need_full = False
        self._admin_dirty = False
        self._task: Optional[asyncio.Task] = None
        # the parts
        self.cache = ZnodeCache(self.session, self.broker_id, self.cluster_id, self.broker_config)
        try:
            self.cache.inter_broker_listener = cfg.inter_broker_listener.listener_name
        except configmod.ConfigError:
            pass            # the first listener's address is used (ZooKeeper's host/port)
        self.controllership = Controllership(self.session, self.cache, self.broker_id,
                                             self.broker_config)
        self.channel = BrokerChannel(self.cache, self.controllership, self.broker_id)
        self.deletion = TopicDeletion(self.cache, self.controllership, self.channel,
                                      self.broker_config)
        self.reassignments = Reassignments(self.cache, self.controllership)
        self.isr = IsrChanges(self.session, self.cache, self.controllership, self.channel,
                              self.broker_id, self.broker_config, self.metadata, self._publish,
                              lambda: self.broker_epoch)
        self.admin = TopicAdmin(self.session, self.cache, self.controllership, cfg,
                                self.broker_config, limits.MutationLimits(cfg), self.metadata,
                                self._alter_broker, self.broker_id)
        self.scram_users = ZkScramUsers(self.session, self.cache)      # issue 17
        # what one part's change means to the others
        self.cache.on_brokers = self._brokers_changed
        self.cache.on_controller = self._controller_changed
        self.controllership.on_elected = self._elected
        self.controllership.on_state_changed = self.channel.changed
        self.channel.on_stop_answered = self.deletion.answered
        self.channel.on_send_failed = self.deletion.resend_to

    # ----------------------------------------------------------------- the parts' links
    def _brokers_changed(self, old: dict, new: dict) -> None:
        for b in set(old) - set(new):
            self.controllership.shutting_down.discard(b)
        for b in new:        # a broker that re-registered (new epoch) is not shutting down
            if b not in old or old[b].epoch != new[b].epoch:
                self.controllership.shutting_down.discard(b)
                self.deletion.resend_to(b)     # pending deletions: StopReplica at once
        if self.broker_id not in new and self.broker_epoch != -1 and not self._closing \
                and not self._session_lost:
            log.warning("our registration %s is gone: registering again",
                        zkdata.broker_path(self.broker_id))
            self._need_full = True
            self.cache.wake.set()

    def _controller_changed(self, cid: int) -> None:
        if self.controllership.active and cid != self.broker_id:
            self.controllership.resign()

    def _elected(self) -> None:
        self.channel.new_term()
        self.deletion.new_term()
        self._admin_dirty = True

    def _on_state(self, state) -> None:
        if self._closing:
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session of broker %d expired%s", self.broker_id,
                        ": resigning as controller" if self.controllership.active else "")
            self.controllership.resign()
            self._session_lost = True
        elif state == KazooState.SUSPENDED:
            log.info("ZooKeeper connection suspended")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._need_full = True
            self.cache.wake.set()

    # ----------------------------------------------------------------- lifecycle
    async def start(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        loop = loop or asyncio.get_running_loop()
        self.channel.loop = loop
        self.session.attach(loop, self.cache.mark, self._on_state)
        await self._register()
        await self.cache.full_reload()
        await self._elect()
        self._publish()
        self._task = loop.create_task(self._run())

    def close(self) -> None:
        self._closing = True
        self.controllership.active = False
        if self._task is not None:
            self._task.cancel()
        try:
            self.session.close()
        except Exception:
            log.exception("closing the ZooKeeper client")

    def register_broker(self, broker_id: int, host: str, port: int, rack=None) -> None:
        """Cluster mode registers in ZooKeeper at start(); this sets the advertised address."""
        self.advertised = (host, port)

    async def _register(self) -> None:
        """The ephemeral /brokers/ids/<id>. A node left by our previous process (kill -9)
        goes away when its session expires: wait for that, then fail clearly."""
        zk, call = self.zk, self.session.call
        path = zkdata.broker_path(self.broker_id)
        data = zkdata.broker_json(self.broker_id, *self.advertised, rack=self.cfg.get("broker.rack"),
                                  endpoints=getattr(self.advertised, "endpoints", ()))
        deadline = time.monotonic() + self.session.session_timeout_s * 2 + 5
        while True:
            try:
                await call(zk.create_async, path, data, ephemeral=True)
                break
            except NodeExistsError:
                try:
                    _, stat = await call(zk.get_async, path)
                    if stat.ephemeralOwner == zk.client_id[0]:
                        break
                except NoNodeError:
                    continue
                if time.monotonic() > deadline:
                    raise configmod.ConfigError(
                        f"Error while creating ephemeral at {path}, node already exists and owner "
                        "does not match current session: is another broker running with broker.id "
                        f"{self.broker_id}?")
                await asyncio.sleep(REGISTER_RETRY_S)
        _, stat = await call(zk.get_async, path)
        self.broker_epoch = stat.czxid
        if self.cache.offline_mine:          # a new session lost the ephemeral list
            await self.cache.publish_offline()
        log.info("registered broker %d at %s:%d (broker epoch %d)", self.broker_id,
                 *self.advertised, self.broker_epoch)

    async def _elect(self) -> None:
        await self.controllership.elect(self._closing or self._session_lost)

    async def _run(self) -> None:
        cache = self.cache
        while not self._closing:
            try:
                await asyncio.wait_for(cache.wake.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
            cache.wake.clear()
            if self._session_lost or not self.session.connected:
                continue
            dirty, cache.dirty = cache.dirty, set()
            try:
                if self._need_full:
                    self._need_full = False
                    await self._register()
                    await cache.full_reload()
                for path in dirty:
                    if await cache.refresh(path):
                        self._admin_dirty = True
                self._publish()
                if cache.controller_id == -1:
                    await self._elect()
                if self.controllership.active:
                    await self._controller_tick()
                    self._publish()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not self._closing:
                    log.warning("controller loop: %s: %s (retrying)", type(e).__name__, e)
                    cache.dirty |= dirty
                    await asyncio.sleep(RETRY_S)

    def _publish(self) -> None:
        """Push the cache's view to the workers when it changed, with a higher epoch."""
        new = self.cache.build(self.md.epoch)
        if new == self.md:
            return
        self.md = replace(new, epoch=self.md.epoch + 1)
        for w in self.workers:
            w.apply_metadata(self.md)

    # ----------------------------------------------------------------- the active controller
    async def _controller_tick(self) -> None:
        ctl = self.controllership
        async with ctl.lock:
            if not ctl.active:
                return
            if self._admin_dirty:
                self._admin_dirty = False
                await self._handle_admin()
            await self.deletion.progress()
            await ctl.plan_partitions()
            if not ctl.active:
                return
            await self.reassignments.progress()
            await ctl.maybe_rebalance()

    async def _handle_admin(self) -> None:
        """The /admin znodes and the ISR change notifications, consumed by the controller."""
        cache, ctl, call, zk = self.cache, self.controllership, self.session.call, self.zk
        await cache.load_deletions()          # the watch again; deletion.progress acts
        # preferred replica elections requested through ZooKeeper
        stat = await call(zk.exists_async, zkdata.PREFERRED_ELECTION, self.session.watch)
        if stat is not None:
            try:
                data, _ = await call(zk.get_async, zkdata.PREFERRED_ELECTION)
                await ctl.elect_locked(0, zkdata.parse_partitions(data, zkdata.PREFERRED_ELECTION))
            except (NoNodeError, zkdata.ZkDataError) as e:
                log.warning("%s: %s", zkdata.PREFERRED_ELECTION, e)
            await ctl.delete_fenced([zkdata.PREFERRED_ELECTION])
        if not ctl.active:
            return
        # reassignments requested through ZooKeeper (kafka-reassign-partitions --zookeeper)
        stat = await call(zk.exists_async, zkdata.REASSIGN, self.session.watch)
        if stat is not None:
            try:
                data, _ = await call(zk.get_async, zkdata.REASSIGN)
                moves = zkdata.parse_reassignment(data)
                await self.reassignments.reassign_locked([(t, p, r) for (t, p), r in moves.items()])
            except (NoNodeError, zkdata.ZkDataError) as e:
                log.warning("%s: %s", zkdata.REASSIGN, e)
            await ctl.delete_fenced([zkdata.REASSIGN])
        if not ctl.active:
            return
        # ISR change notifications: our cache watches every state znode already
        for child in await call(zk.get_children_async, zkdata.ISR_CHANGES, self.session.watch):
            path = f"{zkdata.ISR_CHANGES}/{child}"
            try:
                data, _ = await call(zk.get_async, path)
                for t, p in zkdata.parse_partitions(data, path):
                    if t in cache.topics:
                        await cache.load_state(t, p)
            except (NoNodeError, zkdata.ZkDataError):
                pass
            if not ctl.active:
                return
            await ctl.delete_fenced([path])

    # ----------------------------------------------------------------- the worker-facing API
    @property
    def active(self) -> bool:
        """Whether this broker is the active controller now (ActiveControllerCount)."""
        return self.controllership.active

    def _alter_broker(self, name, ops, incremental, validate_only) -> None:
        if self.dynamic.alter(self.cfg, self.broker_id, name, ops, incremental, validate_only):
            self._broker_cfg = self.dynamic.over(self.cfg)

    async def log_dir_failed(self, partitions) -> None:
        """A worker of this broker lost a log dir: publish our replicas there, so that
        the active controller moves their leadership away and keeps them out of the
        ISR (what Kafka's /log_dir_event_notification leads to)."""
        new = {(str(t), int(p)) for t, p in partitions} - self.cache.offline_mine
        if new:
            self.cache.offline_mine |= new
            log.warning("broker %d: %d replicas in failed log dirs, leadership moves away: %s",
                        self.broker_id, len(new), sorted(new)[:10])
            await self.cache.publish_offline()

    async def create_topics(self, specs, validate_only, timeout_ms, quota=None):
        return await self.admin.create_topics(specs, validate_only, timeout_ms, quota)

    async def ensure_internal_topic(self, name: str) -> None:
        await self.admin.ensure_internal_topic(name)

    async def delete_topics(self, targets, timeout_ms, quota=None):
        return await self.admin.delete_topics(targets, timeout_ms, quota)

    async def create_partitions(self, specs, validate_only, timeout_ms, quota=None):
        return await self.admin.create_partitions(specs, validate_only, timeout_ms, quota)

    async def alter_configs(self, resources, incremental, validate_only):
        out = await self.admin.alter_configs(resources, incremental, validate_only)
        self._publish()
        return out

    async def allocate_producer_id(self) -> int:
        return await self.admin.allocate_producer_id()

    # ---- client quotas (issue #17): /config/users|clients (zk/client_quotas.py)
    async def alter_client_quotas(self, entries, validate_only):
        new, results, changed = client_quotas.apply(self.cache.client_quotas, entries,
                                                    validate_only)
        if changed:
            await zk_client_quotas.write(self.session, new, changed)
            self.cache.client_quotas = await zk_client_quotas.load(self.session)
            self._publish()
        return results
    # ---- end client quotas

    async def alter_partition(self, topic: str, partition: int, leader_id: int, leader_epoch: int,
                              partition_epoch: int, new_isr):
        return await self.isr.alter_partition(topic, partition, leader_id, leader_epoch,
                                              partition_epoch, new_isr)

    async def elect_leaders(self, election_type: int, partitions):
        out = await self.controllership.elect_leaders(election_type, partitions)
        if out[0] == ErrorCode.NONE:
            self._publish()
        return out

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1):
        return await self.isr.controlled_shutdown(broker_id, broker_epoch)

    async def request_controlled_shutdown(self) -> bool:
        return await self.isr.request_controlled_shutdown()

    async def alter_partition_reassignments(self, moves):
        out = await self.reassignments.alter_partition_reassignments(moves)
        if out[0] == ErrorCode.NONE:
            self._publish()
        return out

    async def list_partition_reassignments(self, partitions):
        return await self.reassignments.list_partition_reassignments(partitions)

    # ---- SCRAM users (issue 17)
    async def describe_user_scram_credentials(self, users):
        return await self.scram_users.describe(users)

    async def alter_user_scram_credentials(self, deletions, upsertions):
        out = await self.scram_users.alter(deletions, upsertions)
        self._publish()
        return out
    # ---- end SCRAM users

    async def controller_request(self, api_key: int, version: int, body: dict) -> dict:
        return await self.channel.receive(api_key, version, body, self.broker_epoch,
                                          self._session_lost, self._publish)

    # ----------------------------------------------------------------- ACLs (issue #17)
    async def create_acls(self, bindings):
        """Written to ZooKeeper by this broker (zk/acls.py); every broker reloads on the
        change notification."""
        results = await self.cache.acl_store.create_acls(bindings)
        self._publish()
        return results

    async def delete_acls(self, filters):
        results = await self.cache.acl_store.delete_acls(filters)
        self._publish()
        return results
