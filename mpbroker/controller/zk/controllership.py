"""Controllership: the election of the active controller, its epoch fencing, and the
partition state writes only the active controller makes.

One broker at a time is the active controller: it created the ephemeral `/controller`
together with an increment of `/controller_epoch` (one ZooKeeper multi-op). Every one of
its writes is a multi-op whose first op checks `/controller_epoch`'s version (`fenced` /
`commit`), so a deposed controller (session expired, a newer epoch written) can never
change anything: its write fails and it resigns. A broker that is not the controller
checks the version it last read (CreatePartitions, served by any broker).

Only the active controller initializes partition states, elects leaders (the pure rules
of `mpbroker/controller/elections.py`), shrinks the ISR of dead brokers and of followers
shutting down, runs preferred elections (ElectLeaders, `/admin/preferred_replica_election`,
auto leader rebalance).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Callable, Optional, Set

from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from mpbroker.controller import elections, zkdata
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.session import ZkSession
from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

MULTI_OPS = 1000          # znodes deleted per ZooKeeper transaction (jute.maxbuffer is 1 MiB)
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


class Controllership:
    def __init__(self, session: ZkSession, cache: ZnodeCache, broker_id: int,
                 broker_cfg: Callable[[], object]):
        self.session = session
        self.cache = cache
        self.broker_id = broker_id
        self._broker_cfg = broker_cfg
        self.active = False
        self.epoch = 0                      # the controller epoch this broker won
        self.epoch_zk_version = -1
        self.shutting_down: Set[int] = set()
        self.lock = asyncio.Lock()          # the controller's changes, one at a time
        self.last_rebalance = time.monotonic()
        self.on_elected: Callable[[], None] = lambda: None
        self.on_state_changed: Callable[[tuple], None] = lambda key: None

    # ----------------------------------------------------------------- election
    async def elect(self, stopping: bool) -> None:
        if stopping or self.active:
            return
        zk, call, cache = self.session.zk, self.session.call, self.cache
        try:
            data, stat = await call(zk.get_async, zkdata.CONTROLLER_EPOCH)
            epoch, version = int(data or b"0"), stat.version
        except NoNodeError:
            try:
                await call(zk.create_async, zkdata.CONTROLLER_EPOCH, b"0")
            except NodeExistsError:
                pass
            cache.wake.set()
            return
        t = self.session.transaction()
        t.create(zkdata.CONTROLLER, zkdata.controller_json(self.broker_id), ephemeral=True)
        t.set_data(zkdata.CONTROLLER_EPOCH, str(epoch + 1).encode(), version=version)
        results = await call(t.commit_async)
        if any(isinstance(r, Exception) for r in results):
            await cache.load_controller()
            if cache.controller_id == -1:
                cache.wake.set()     # lost a race on /controller_epoch: try again
            return
        self.active = True
        cache.controller_id = self.broker_id
        self.epoch, self.epoch_zk_version = epoch + 1, results[1].version
        cache.seen_controller_epoch = max(cache.seen_controller_epoch, self.epoch)
        self.on_elected()            # a new term: every broker is told the whole state
        self.shutting_down = set()
        self.last_rebalance = time.monotonic()
        log.info("broker %d is the controller now (controller epoch %d)", self.broker_id,
                 self.epoch)
        await cache.load_controller()    # re-arm the watch on /controller
        cache.wake.set()

    def resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.active = False
        self.shutting_down = set()

    # ----------------------------------------------------------------- fenced writes
    def fenced(self):
        """A ZooKeeper transaction whose first op checks /controller_epoch's version: the
        one this controller wrote when elected (a deposed controller's write fails), or on
        a broker that is not the controller the one it last read (a write planned on a
        view from before a controller change fails)."""
        t = self.session.transaction()
        t.check(zkdata.CONTROLLER_EPOCH,
                self.epoch_zk_version if self.active else self.cache.seen_epoch_zk_version)
        return t

    async def commit(self, t) -> Optional[list]:
        """Commit a `fenced` transaction: the results of its own ops (an exception in
        place of each failed one), or None when the epoch check failed (the active
        controller then resigns)."""
        results = await self.session.call(t.commit_async)
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            if self.active:
                log.warning("controller epoch %d is stale: resigning", self.epoch)
                self.resign()
            return None
        return results[1:]

    async def delete_fenced(self, paths) -> bool:
        """The active controller deletes znodes (children listed before their parents) in
        fenced transactions of at most MULTI_OPS deletes; False when one failed (nothing
        of that one applied) or this is not the active controller."""
        paths = list(paths)
        for i in range(0, len(paths), MULTI_OPS):
            if not self.active:
                return False
            t = self.fenced()
            for path in paths[i:i + MULTI_OPS]:
                t.delete(path)
            results = await self.commit(t)
            if results is None:
                return False
            errors = [(path, r) for path, r in zip(paths[i:], results)
                      if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if errors:
                log.info("deleting %s: %s", errors[0][0], type(errors[0][1]).__name__)
                return False
        return True

    async def subtree(self, path: str) -> list:
        """`path` and every znode below it, children before parents; [] when missing."""
        try:
            children = await self.session.call(self.session.zk.get_children_async, path)
        except NoNodeError:
            return []
        below = await asyncio.gather(*(self.subtree(f"{path}/{c}") for c in children))
        return [x for sub in below for x in sub] + [path]

    async def write_state(self, topic: str, p: int, leader: int, isr,
                          old: zkdata.LeaderAndIsr) -> bool:
        """A fenced conditional write of a new leader/ISR (leader epoch + 1)."""
        t = self.fenced()
        new = self.state_op(t, topic, p, leader, isr, old)
        results = await self.commit(t)
        if results is None:
            return False
        if isinstance(results[0], Exception):
            await self.cache.load_state(topic, p)      # someone changed it: plan again
            self.cache.wake.set()
            return False
        self.state_written(topic, p, new, old, results[0])
        return True

    def state_op(self, t, topic: str, p: int, leader: int, isr,
                 old: zkdata.LeaderAndIsr) -> zkdata.LeaderAndIsr:
        """Add the conditional set of a new leader/ISR (leader epoch + 1) to transaction t."""
        new = zkdata.LeaderAndIsr(leader, old.leader_epoch + 1, tuple(isr), self.epoch)
        t.set_data(zkdata.state_path(topic, p), zkdata.state_json(new), version=old.zk_version)
        return new

    def state_written(self, topic: str, p: int, new: zkdata.LeaderAndIsr,
                      old: zkdata.LeaderAndIsr, stat) -> None:
        self.cache.states[(topic, p)] = replace(new, zk_version=stat.version)
        self.on_state_changed((topic, p))
        log.info("%s-%d: leader %d -> %d, isr %s -> %s, leader epoch %d", topic, p, old.leader,
                 new.leader, list(old.isr), list(new.isr), new.leader_epoch)

    # ----------------------------------------------------------------- partition states
    async def init_partitions(self, topic: str, new: list, live) -> None:
        """Initialize the new partitions `new` ([(partition, replicas)]) of `topic` in
        fenced transactions of up to MULTI_OPS / 2 partitions (one for a smaller topic),
        then tell the brokers about each batch in one go, as Kafka's controller brings a
        new topic's partitions online together: a broker never shows a topic with only
        some of them, on which a consumer group would assign too few partitions, or a
        group id map to another coordinator."""
        exists = self.session.zk.exists_async
        for i in range(0, len(new), MULTI_OPS // 2):
            t = self.fenced()
            made = []
            if await self.session.call(exists, f"{zkdata.topic_path(topic)}/partitions") is None:
                t.create(f"{zkdata.topic_path(topic)}/partitions", b"")
            for p, ar in new[i:i + MULTI_OPS // 2]:
                candidates = [r for r in ar if r in live and r not in self.shutting_down]
                if not candidates:
                    continue    # stays new until a replica is alive (Kafka's NewPartition)
                isr = tuple(r for r in ar if r in live)
                state = zkdata.LeaderAndIsr(candidates[0], 0, isr, self.epoch)
                if await self.session.call(exists, zkdata.partition_path(topic, p)) is None:
                    t.create(zkdata.partition_path(topic, p), b"")
                t.create(zkdata.state_path(topic, p), zkdata.state_json(state))
                made.append(p)
            if not made:
                continue
            if await self.commit(t) is None:
                return
            await asyncio.gather(*(self.cache.load_state(topic, p) for p in made))
            for p in made:
                self.on_state_changed((topic, p))

    async def plan_partitions(self) -> None:
        """Initialize new partitions; elect and shrink ISRs where brokers came and went."""
        cache = self.cache
        live = set(cache.brokers)
        self.shutting_down &= live
        for name, ta in list(cache.topics.items()):
            if name in cache.deleting:
                continue              # Kafka elects nothing for a topic being deleted
            new = [(p, ar) for p, ar in ta.partitions.items() if (name, p) not in cache.states]
            if new:
                if not self.active:
                    return
                await self.init_partitions(name, new, live)
            fresh = {p for p, _ in new}
            for p, ar in list(ta.partitions.items()):
                if not self.active:
                    return
                st = cache.states.get((name, p))
                if st is None or p in fresh:
                    continue
                gone = cache.offline.get((name, p))
                choice = elections.plan(ar, st.leader, st.isr, live - gone if gone else live,
                                        self.shutting_down, cache.unclean(name))
                if choice is not None:
                    await self.write_state(name, p, choice[0], choice[1], st)

    async def maybe_rebalance(self) -> None:
        cfg, cache = self._broker_cfg(), self.cache
        interval = cfg["leader.imbalance.check.interval.seconds"]
        if not cfg["auto.leader.rebalance.enable"] or time.monotonic() - self.last_rebalance < interval:
            return
        self.last_rebalance = time.monotonic()
        assignments = {(t, p): ar for t, ta in cache.topics.items() if t not in cache.deleting
                       for p, ar in ta.partitions.items()}
        leaders = {k: s.leader for k, s in cache.states.items()}
        live = set(cache.brokers) - self.shutting_down
        for b in sorted(live):
            ratio, keys = elections.imbalanced(assignments, leaders, b)
            if ratio * 100 > cfg["leader.imbalance.per.broker.percentage"]:
                log.info("leader imbalance of broker %d is %.0f%%: preferred elections", b, ratio * 100)
                for t, p in keys:
                    st = cache.states.get((t, p))
                    choice = st and elections.preferred_leader(assignments[(t, p)], st.isr, live)
                    if choice:
                        await self.write_state(t, p, choice[0], choice[1], st)

    # ----------------------------------------------------------------- ElectLeaders
    async def elect_leaders(self, election_type: int, partitions):
        """ElectLeaders -> (error_code, [(topic, partition, error_code, message)]).
        election_type 0 preferred, 1 unclean; partitions None: every partition."""
        if not self.active:
            return ErrorCode.NOT_CONTROLLER, [
                (t, p, ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
                for t, p in (partitions or [])]
        async with self.lock:
            return ErrorCode.NONE, await self.elect_locked(election_type, partitions)

    async def elect_locked(self, election_type: int, partitions):
        cache = self.cache
        live = set(cache.brokers) - self.shutting_down
        if partitions is None:
            partitions = [(t, p) for t, ta in cache.topics.items() if t not in cache.deleting
                          for p in ta.partitions if (t, p) in cache.states and (
                              cache.states[(t, p)].leader != ta.partitions[p][0] if election_type == 0
                              else cache.states[(t, p)].leader not in live)]
        out = []
        for t, p in partitions:
            if t in cache.deleting:
                out.append((t, p, ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted"))
                continue
            ar = cache.topics[t].partitions.get(p) if t in cache.topics else None
            st = cache.states.get((t, p))
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
            if choice is None or not await self.write_state(t, p, choice[0], choice[1], st):
                out.append((t, p, err, f"Failed to elect leader for partition {t}-{p} under strategy "
                                       f"{strategy}"))
            else:
                out.append((t, p, ErrorCode.NONE, None))
        return out
