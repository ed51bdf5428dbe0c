"""ISR changes and controlled shutdown.

* Leaders change their ISR themselves (`alter_partition`, served by any broker): the
  checks of `mpbroker/controller/isr_change.py` on the state znode read afresh, then a
  conditional set of the state znode on its version and an
  `/isr_change_notification/isr_change_` znode. An ISR may only grow by brokers that are
  registered and not shutting down (INELIGIBLE_REPLICA, KIP-841).
* Controlled shutdown (`controlled_shutdown`, on the active controller): leaderships move
  away, the broker leaves the ISRs it follows, and it gets StopReplica(delete=false) for
  the partitions it follows, so its replica fetchers stop (it shows itself in their
  offline replicas, which its workers read as "close, keep the log").
* `request_controlled_shutdown` is the stopping broker's side
  (`controlled.shutdown.max.retries` attempts, then it stops anyway).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Callable

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from mpbroker.controller import elections, isr_change, zkdata
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.channel import BrokerChannel
from mpbroker.controller.zk.controllership import Controllership
from mpbroker.controller.zk.session import ZkSession
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.client import inter_broker_cached
from workers.kafka_client import KafkaConnection

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN = 7     # the API key
STOP_REPLICA_WAIT_S = 5     # how long a controlled shutdown waits for the broker's StopReplica answer


class IsrChanges:
    def __init__(self, session: ZkSession, cache: ZnodeCache, controllership: Controllership,
                 channel: BrokerChannel, broker_id: int, broker_cfg: Callable[[], object],
                 metadata: Callable[[], object], publish: Callable[[], None],
                 broker_epoch: Callable[[], int]):
        self.session = session
        self.cache = cache
        self.controllership = controllership
        self.channel = channel
        self.broker_id = broker_id
        self._broker_cfg = broker_cfg
        self._metadata = metadata
        self._publish = publish
        self._broker_epoch = broker_epoch

    async def alter_partition(self, topic: str, partition: int, leader_id: int, leader_epoch: int,
                              partition_epoch: int, new_isr):
        """A leader changes its ISR (see docs/INTERFACES.md "Cluster mode")."""
        cache, call, zk = self.cache, self.session.call, self.session.zk
        key = (topic, partition)
        ta = cache.topics.get(topic)
        if ta is None or partition not in ta.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        await cache.load_state(topic, partition)      # the current version, not a cached one
        st = cache.states.get(key)
        if st is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        self._publish()
        md = self._metadata()
        current = md.topics[topic].partitions.get(partition) if topic in md.topics else None
        new_isr = tuple(new_isr)
        eligible = set(cache.brokers) - self.controllership.shutting_down
        code = isr_change.check(st.leader, st.leader_epoch, st.zk_version, ta.partitions[partition],
                                st.isr, leader_id, leader_epoch, partition_epoch, new_isr, eligible)
        if code != ErrorCode.NONE:
            return code, current
        new = replace(st, isr=new_isr)
        try:
            stat = await call(zk.set_async, zkdata.state_path(topic, partition),
                              zkdata.state_json(new), version=st.zk_version)
        except BadVersionError:
            await cache.load_state(topic, partition)
            self._publish()
            cur = self._metadata().topics.get(topic)
            return ErrorCode.INVALID_UPDATE_VERSION, cur and cur.partitions.get(partition)
        except NoNodeError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        cache.states[key] = replace(new, zk_version=stat.version)
        try:
            await call(zk.create_async, f"{zkdata.ISR_CHANGES}/isr_change_",
                       zkdata.partitions_json([key]), sequence=True)
        except KazooException as e:
            log.warning("isr change notification for %s-%d: %s", topic, partition, e)
        log.info("%s-%d: isr %s -> %s (leader %d, epoch %d)", topic, partition, list(st.isr),
                 list(new_isr), leader_id, leader_epoch)
        self._publish()
        return ErrorCode.NONE, self._metadata().topics[topic].partitions[partition]

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1):
        """ControlledShutdown on the active controller -> (error_code, [(topic, partition)]
        still led by the broker)."""
        cache, ctl = self.cache, self.controllership
        if not ctl.active:
            return ErrorCode.NOT_CONTROLLER, []
        b = cache.brokers.get(broker_id)
        if b is None:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        if broker_epoch not in (-1, None) and broker_epoch != b.epoch:
            return ErrorCode.STALE_BROKER_EPOCH, []
        async with ctl.lock:
            ctl.shutting_down.add(broker_id)
            live = set(cache.brokers)
            followed = {}
            for name, ta in list(cache.topics.items()):
                for p, ar in ta.partitions.items():
                    st = cache.states.get((name, p))
                    if st is None or broker_id not in ar or len(ar) < 2 or not ctl.active \
                            or name in cache.deleting:
                        continue
                    if st.leader == broker_id:
                        choice = elections.controlled_shutdown_leader(ar, st.isr, live, ctl.shutting_down)
                        if choice is not None:
                            await ctl.write_state(name, p, choice[0], choice[1], st)
                        continue
                    if broker_id in st.isr and len(st.isr) > 1:
                        await ctl.write_state(name, p, st.leader,
                                              tuple(r for r in st.isr if r != broker_id), st)
                    followed[(name, p)] = False
            stopped = None
            if followed:   # its replica fetchers stop, so no leader adds it back to an ISR
                stopped = self.session.loop.create_future()
                self.channel.queue(broker_id, set(), followed, sent=stopped)
            remaining = sorted((t, p) for (t, p), st in cache.states.items()
                               if st.leader == broker_id and t not in cache.deleting
                               and len(cache.topics[t].partitions.get(p, ())) > 1)
        self._publish()
        if stopped is not None:     # answered once the broker stopped its followers (bounded)
            try:
                await asyncio.wait_for(stopped, STOP_REPLICA_WAIT_S)
            except asyncio.TimeoutError:
                log.info("StopReplica to broker %d not answered yet", broker_id)
        log.info("controlled shutdown of broker %d: %d partitions still led", broker_id, len(remaining))
        return ErrorCode.NONE, remaining

    async def request_controlled_shutdown(self) -> bool:
        """This broker is stopping: ask the active controller to move its leaderships
        (ControlledShutdown v3), `controlled.shutdown.max.retries` attempts."""
        cfg = self._broker_cfg()
        retries = max(1, cfg["controlled.shutdown.max.retries"])
        backoff = cfg["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(1, retries + 1):
            code, remaining = ErrorCode.NOT_CONTROLLER, []
            try:
                cid = self.cache.controller_id
                if cid == self.broker_id and self.controllership.active:
                    code, remaining = await self.controlled_shutdown(self.broker_id, self._broker_epoch())
                elif cid in self.cache.brokers:
                    code, remaining = await self._ask(self.cache.brokers[cid])
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

    async def _ask(self, controller: zkdata.BrokerInfo):
        """ControlledShutdown v3 to the active controller -> (error_code, remaining)."""
        conn = await KafkaConnection.connect(
            controller.host, controller.port,
            client_id=f"mpbroker-{self.broker_id}-controlled-shutdown", timeout_ms=30000,
            security=inter_broker_cached(self._broker_cfg()))
        try:
            resp = await conn.request(CONTROLLED_SHUTDOWN, 3, {
                "broker_id": self.broker_id, "broker_epoch": self._broker_epoch()})
        finally:
            await conn.close()
        return resp["error_code"], [(r["topic_name"], r["partition_index"])
                                    for r in resp["remaining_partitions"]]
