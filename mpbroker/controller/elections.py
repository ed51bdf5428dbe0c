"""Leader election strategies and the partition state planner of the ZooKeeper controller.
Pure functions over values (Kafka's Election.scala / PartitionStateMachine rules); no I/O.

A partition is (assignment AR in preference order, LeaderAndIsr). Every function returns
the new (leader, isr) or None when it cannot or need not change anything; the caller
(the active controller, `mpbroker/controller/zk/`) bumps the leader epoch and writes
the state znode conditionally on its zkVersion.

* offline: the first replica in AR order that is live and in the ISR; new ISR = the live
  ISR members. Else, with `unclean.leader.election.enable`, the first live replica in AR
  order, ISR = [it]. Else none (the partition stays offline, leader -1).
* reassignment: the first replica of the target AR that is live and in the ISR.
* preferred: AR[0] when live and in the ISR.
* controlled shutdown: the first replica in AR order that is live, in the ISR and not
  shutting down; new ISR = the ISR without the brokers shutting down.
* `plan`: what the controller does to a partition when brokers come and go: elect when
  the leader is gone or -1; drop dead brokers from the ISR (never emptying it: Kafka
  keeps the last member so that it can come back as a clean leader), and followers in
  controlled shutdown (a leader that added one back while it was stopping).
"""
from __future__ import annotations

from typing import AbstractSet, Optional, Sequence, Tuple

NO_LEADER = -1
Choice = Optional[Tuple[int, Tuple[int, ...]]]


def offline_leader(assignment: Sequence[int], isr: Sequence[int], live: AbstractSet[int],
                   unclean: bool = False) -> Choice:
    live_isr = tuple(r for r in isr if r in live)
    for r in assignment:
        if r in live and r in isr:
            return r, live_isr
    if unclean:
        for r in assignment:
            if r in live:
                return r, (r,)
    return None


def reassignment_leader(target: Sequence[int], isr: Sequence[int], live: AbstractSet[int]) -> Choice:
    for r in target:
        if r in live and r in isr:
            return r, tuple(isr)
    return None


def preferred_leader(assignment: Sequence[int], isr: Sequence[int], live: AbstractSet[int]) -> Choice:
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0], tuple(isr)
    return None


def controlled_shutdown_leader(assignment: Sequence[int], isr: Sequence[int], live: AbstractSet[int],
                               shutting_down: AbstractSet[int]) -> Choice:
    new_isr = tuple(r for r in isr if r not in shutting_down)
    for r in assignment:
        if r in live and r in new_isr:
            return r, new_isr
    return None


def plan(assignment: Sequence[int], leader: int, isr: Sequence[int], live: AbstractSet[int],
         shutting_down: AbstractSet[int] = frozenset(), unclean: bool = False) -> Choice:
    """The (leader, isr) the partition should move to, or None if it is fine as is."""
    candidates = frozenset(live) - frozenset(shutting_down)
    isr = tuple(isr)
    if leader == NO_LEADER or leader not in live:
        choice = offline_leader(assignment, isr, candidates, unclean)
        if choice is not None:
            return choice
        if leader == NO_LEADER:
            return None
        # the leader died and nobody can take over: offline, keep the last ISR member(s)
        kept = tuple(r for r in isr if r in live) or ((leader,) if leader in isr else isr[:1])
        return NO_LEADER, kept
    kept = tuple(r for r in isr if r in live and (r == leader or r not in shutting_down))
    if kept != isr:
        new_isr = kept or (leader,)
        if leader not in new_isr:
            new_isr = (leader,) + new_isr
        if new_isr != isr:
            return leader, new_isr
    return None


def imbalanced(assignments: dict, leaders: dict, broker: int) -> Tuple[float, list]:
    """Kafka's auto leader rebalance check for one broker: the share of the partitions
    whose preferred replica is `broker` that it does not lead, and those partitions.
    `assignments`/`leaders` map a partition key to its AR / its current leader."""
    preferred = [k for k, ar in assignments.items() if ar and ar[0] == broker]
    if not preferred:
        return 0.0, []
    not_led = [k for k in preferred if leaders.get(k) != broker]
    return len(not_led) / len(preferred), not_led
