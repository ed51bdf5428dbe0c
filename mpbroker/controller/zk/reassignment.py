"""Partition reassignments (KIP-455) on the active controller.

A reassignment lives in the topic znode's `adding_replicas` / `removing_replicas`: the
replica set RS is the target plus the replicas leaving. Requests come from
AlterPartitionReassignments or `/admin/reassign_partitions` (kafka-reassign-partitions
--zookeeper); each controller tick completes those whose target replicas are all in the
ISR (the new leader from the reassignment election of `elections.py`).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Dict

from mpbroker.controller import elections, zkdata
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.controllership import NOT_CONTROLLER_MESSAGE, Controllership
from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def reassignment_of(ta: zkdata.TopicAssignment, p: int):
    """(RS, target, original) of partition p; target is None when nothing is ongoing."""
    rs = ta.partitions[p]
    adding, removing = (ta.adding or {}).get(p, ()), (ta.removing or {}).get(p, ())
    if not adding and not removing:
        return rs, None, rs
    return rs, tuple(r for r in rs if r not in removing), tuple(r for r in rs if r not in adding)


class Reassignments:
    def __init__(self, cache: ZnodeCache, controllership: Controllership):
        self.cache = cache
        self.controllership = controllership

    async def write_assignment(self, topic: str, changes: Dict[int, tuple], states=None) -> bool:
        """changes: p -> (RS, adding, removing); a fenced conditional write of the topic
        znode, in the same transaction as the new leader/ISR of `states` ({p: (leader,
        isr, old state)}): a reassignment ends, or is cancelled, at once, so no leader
        ever sees the smaller ISR with the larger replica set (and adds a leaving
        replica back)."""
        cache, ctl = self.cache, self.controllership
        ta = cache.topics[topic]
        parts, adding, removing = dict(ta.partitions), dict(ta.adding or {}), dict(ta.removing or {})
        for p, (rs, add, rem) in changes.items():
            parts[p] = tuple(rs)
            adding.pop(p, None)
            removing.pop(p, None)
            if add:
                adding[p] = tuple(add)
            if rem:
                removing[p] = tuple(rem)
        t = ctl.fenced()
        t.set_data(zkdata.topic_path(topic), zkdata.topic_json(ta.topic_id, parts, adding, removing),
                   version=cache.topic_versions.get(topic, -1))
        states = states or {}
        new = {p: ctl.state_op(t, topic, p, *x) for p, x in states.items()}
        results = await ctl.commit(t)
        ok = results is not None and not any(isinstance(r, Exception) for r in results)
        if not ok:
            await asyncio.gather(*(cache.load_state(topic, p) for p in states))
            await cache.load_topic(topic)
            return False
        # the cache at once (requests served meanwhile see it); the watch reloads it too
        cache.topics[topic] = zkdata.TopicAssignment(ta.topic_id, parts, adding, removing)
        cache.topic_versions[topic] = results[0].version
        for (p, n), stat in zip(new.items(), results[1:]):
            ctl.state_written(topic, p, n, states[p][2], stat)
        return True

    async def reassign_locked(self, moves) -> list:
        """moves: [(topic, p, replicas | None)] -> [(topic, p, code, message)]."""
        cache, ctl = self.cache, self.controllership
        out, per_topic = [], {}
        known = set(cache.brokers)
        for t, p, target in moves:
            ta = cache.topics.get(t) if t not in cache.deleting else None
            if ta is None or p not in ta.partitions or (t, p) not in cache.states:
                out.append((t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "The partition does not exist."))
                continue
            rs, ongoing, original = reassignment_of(ta, p)
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
                    st = cache.states[(t, p)]
                    live = set(cache.brokers) - ctl.shutting_down
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
            if not await self.write_assignment(t, changes, states):
                for i, (tt, p, code, msg) in enumerate(out):
                    if tt == t and p in parts and code == ErrorCode.NONE:
                        out[i] = (tt, p, ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                  f"Topic {t} changed concurrently; retry.")
        cache.wake.set()
        return out

    async def progress(self) -> None:
        """Finish the reassignments whose target replicas are all in the ISR: leader from
        the target (reassignment election) if needed, ISR limited to the target, AR =
        target, adding/removing cleared."""
        cache, ctl = self.cache, self.controllership
        live = set(cache.brokers) - ctl.shutting_down
        for t, ta in list(cache.topics.items()):
            if t in cache.deleting:
                continue
            done, states = {}, {}
            for p in set(ta.adding or {}) | set(ta.removing or {}):
                if p not in ta.partitions:
                    continue
                rs, target, original = reassignment_of(ta, p)
                st = cache.states.get((t, p))
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
            if done and await self.write_assignment(t, done, states):
                log.info("reassignment of %s partitions %s completed", t, sorted(done))

    async def alter_partition_reassignments(self, moves):
        """AlterPartitionReassignments -> (error_code, message, [(topic, p, code, message)])."""
        ctl = self.controllership
        if not ctl.active:
            return ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE, []
        async with ctl.lock:
            out = await self.reassign_locked(moves)
        return ErrorCode.NONE, None, out

    async def list_partition_reassignments(self, partitions):
        """-> (error_code, message, [(topic, p, replicas, adding, removing)]) of the ongoing ones."""
        ctl = self.controllership
        # After the controller's change in flight, as Kafka's controller answers from its
        # event queue: a reassignment that ZooKeeper shows complete (its znode written,
        # the commit's answer not yet back in this loop) is not listed any more.
        async with ctl.lock:
            if not ctl.active:
                return ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE, []
            return ErrorCode.NONE, None, self._ongoing(partitions)

    def _ongoing(self, partitions) -> list:
        cache = self.cache
        out = []
        keys = partitions if partitions is not None else [
            (t, p) for t, ta in sorted(cache.topics.items()) for p in sorted(ta.partitions)]
        for t, p in keys:
            ta = cache.topics.get(t)
            if ta is None or p not in ta.partitions:
                continue
            rs = ta.partitions[p]
            adding, removing = (ta.adding or {}).get(p, ()), (ta.removing or {}).get(p, ())
            if adding or removing:
                out.append((t, p, list(rs), list(adding), list(removing)))
        return out
