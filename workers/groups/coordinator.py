"""The group coordinator of one `__consumer_offsets` partition: an I/O-free state machine.

The worker that owns the partition creates one GroupCoordinator per owned offsets
partition and wires three things into it:

* ``clock() -> int``: epoch milliseconds.
* ``scheduler.schedule(delay_ms, callback) -> handle`` with ``handle.cancel()``: the
  worker's timing wheel. Callbacks run on the worker's loop, after the call that
  scheduled them returns; a cancelled handle never fires.
* ``appender(records, callback, **txn) -> int``: append ``records`` (a list of
  ``(key: bytes, value: bytes | None)``; None is a tombstone) to this partition as one
  batch. Either it refuses before writing anything and returns the error code (the
  callback is never called; ``_append`` undoes the caller's change, see below), or it
  returns 0 and calls ``callback(error_code)`` exactly once, now or later, when the batch
  is committed (acks=all semantics) or failed. Batches must land in the log in call
  order. For transactional offset commits ``txn`` is ``producer_id=, producer_epoch=``
  and the batch must be transactional (the transaction coordinator later writes the
  marker and the worker calls ``complete_txn``).

Life cycle: constructed LOADING (every request answers COORDINATOR_LOAD_IN_PROGRESS;
Heartbeat answers NONE and SyncGroup REBALANCE_IN_PROGRESS, as Kafka does), then
``load(records)`` replays the partition, or the worker feeds it in chunks with
``begin_load() / load_records(chunk) / finish_load()`` between loop iterations
(workers/groups/service.py); then ACTIVE. A failed load starts over with ``unload()``
and ``begin_load()``: the coordinator is never ACTIVE with part of its state.
``unload()`` when the partition moves away: waiting JoinGroup/SyncGroup get
NOT_COORDINATOR, timers are cancelled, later append callbacks answer NOT_COORDINATOR, and
every later request gets NOT_COORDINATOR until the next ``begin_load()``.

Handlers take a decoded request dict (docs/INTERFACES.md naming) and its api version, and
answer through ``respond(response_dict)`` exactly once, now or later (JoinGroup waits for
the rebalance, SyncGroup followers for the leader, commits for the append). Multi-group
requests (DescribeGroups, DeleteGroups, ListGroups) return their per-group entries
synchronously for the caller to merge across coordinators; OffsetFetch v8+ takes a request
whose ``groups`` are those this partition coordinates and answers with those groups.
Topic existence and authorization are the caller's checks (UNKNOWN_TOPIC_OR_PARTITION,
GROUP_AUTHORIZATION_FAILED, ...): by the time a request gets here it is authorized.

The rules follow Kafka's classic GroupCoordinator (GroupCoordinator.scala, 2.x-3.x):
KIP-394 member id required on the first JoinGroup (v4+), KIP-345 static membership,
group.initial.rebalance.delay.ms for an Empty group's first rebalance, DelayedJoin
(rebalance timeout), DelayedHeartbeat (session timeout; 5 minutes for a member that has
not completed its first join), DelayedSync (members that never SyncGroup), group.max.size,
KIP-559 protocol type/name checks, KIP-814 skip_assignment, KIP-211 offset expiry.
"""
from __future__ import annotations

from workers.groups.admin import Admin
from workers.groups.base import ACTIVE, LOADING, UNLOADED
from workers.groups.load import Loading, LoadRecord, TxnMarker
from workers.groups.membership import Membership
from workers.groups.offsets import Offsets

__all__ = ["GroupCoordinator", "LoadRecord", "TxnMarker", "LOADING", "ACTIVE", "UNLOADED"]


class GroupCoordinator(Membership, Offsets, Admin, Loading):
    """One offsets partition's coordinator: the parts above over `CoordinatorBase`
    (workers/groups/base.py: its state, constructor and plumbing)."""
