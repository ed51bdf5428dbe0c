"""Delayed operations and the purgatory that holds them (Kafka's
``DelayedOperation`` / ``DelayedOperationPurgatory``).

A delayed operation is work that answers later: a Produce with acks=all waits
for the high watermark, a Fetch waits for ``fetch.min.bytes``, a DeleteRecords
waits for the followers' log start offsets, a JoinGroup waits for the other
members. It completes exactly once, either

* by an external event: the owner calls ``purgatory.check_and_complete(key)``
  when something about ``key`` (a partition, a group) changed, and the
  operation's ``try_complete_key(key)`` (``try_complete()`` unless the op can
  recheck that key alone) finds it can finish now; or
* by timeout: the operation is a ``TimerTask`` on the worker's timing wheel;
  when it expires ``run()`` force-completes it and calls ``on_expiration()``.

``force_complete()`` is the single gate: the first caller flips ``completed``,
cancels the timer task and calls ``on_complete()``; every later or re-entrant
caller gets False. Subclasses follow Kafka's contract for ``try_complete()``:
check the condition and, if met, ``return self.force_complete()``; else return
False.

Watch lists
-----------
``try_complete_else_watch(op, keys)`` is Kafka's double check: try to complete;
if not done, put the op on the watch list of every key, then try once more (a
triggering event between the first try and the watch would otherwise be
missed: with one thread no such event can arrive, but a ``try_complete`` that
itself triggers events can; an op whose ``try_complete`` cannot, says so with
``recheck_after_watch = False`` and is tried once); if still not done, add it
to the timer. A completed op stays on the watch lists of its other keys until
those keys are checked or a purge sweeps them: purging runs when more than
``purge_interval`` completed operations may still sit in watch lists
(``{producer,fetch}.purgatory.purge.interval.requests``, default 1000). An op
class with ``unwatch_on_complete`` (DelayedFetch, watched on every partition of a
Fetch) leaves all its watch lists when it completes instead.

Listeners
---------
``listen(keys, listener)``: ``listener.checked(key)`` is called at every
``check_and_complete`` of those keys, before the ops watching it are tried, until
``unlisten``. A connection's Fetch memory (workers/handlers/fetch/memo.py) learns so
which partitions it must read again, and wakes its parked Fetch, which waits in the
purgatory on no watch list (``add_unwatched``: counted and timed, completed by its
holder).

Concurrency contract
--------------------
Single-threaded: a Purgatory, its Timer and its operations belong to one
worker's event loop and are only touched from it; there are no locks. What
Kafka guards with the operation lock is guarded here by the order of steps:
``completed`` is set before ``on_complete()`` runs, so callbacks may re-enter
``check_and_complete``, ``force_complete`` or the timer freely. Watch lists are
iterated over snapshots, so callbacks may add or complete other operations of
the same key while it is being checked. Exceptions from ``try_complete`` /
``on_complete`` propagate to the caller (they are bugs, not client errors).
"""
from __future__ import annotations

from typing import Callable, Dict, Hashable, Iterable, List, Optional

from workers.timing_wheel import Timer, TimerTask

__all__ = ["DelayedOperation", "Purgatory"]

DEFAULT_PURGE_INTERVAL = 1000


class DelayedOperation(TimerTask):
    """Subclasses implement ``try_complete``, ``on_complete``, ``on_expiration``."""

    __slots__ = ("_completed", "_purgatory", "_keys")

    # False for an op whose try_complete, when it does not complete, changes nothing
    # another op could see (DelayedFetch): then the check after watching, which is
    # there for events raised by a try_complete, cannot find anything new
    recheck_after_watch = True

    # True for an op watched on many keys and completed by one of them (a Fetch of
    # many partitions): on completion it leaves every watch list at once, instead of
    # waiting in each for that key's next check or a purge (each check would then step
    # over the completed ops of every Fetch since the key's last one)
    unwatch_on_complete = False

    def __init__(self, delay_ms: int):
        super().__init__(delay_ms)
        self._completed = False
        self._purgatory: Optional[Purgatory] = None
        self._keys: Optional[list] = None      # its watch lists (unwatch_on_complete)

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now: True for exactly one caller over the op's life."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()                       # the timeout can no longer fire
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._note_completed(self)
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        """If the op can complete now, ``return self.force_complete()``; else False."""
        raise NotImplementedError

    def try_complete_key(self, key: Hashable) -> bool:
        """``try_complete`` when ``key`` changed (``check_and_complete(key)``): an op
        may check only what ``key`` changed (DelayedFetch, of many partitions)."""
        return self.try_complete()

    def on_complete(self) -> None:
        """The completion logic (send the response); runs exactly once."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after ``on_complete`` when completion was caused by the timeout."""

    def run(self) -> None:
        # The timer fired: complete by expiration unless something beat us to it.
        if self.force_complete():
            self.on_expiration()


class Purgatory:
    """Operations waiting on keys, with their timeouts on ``timer``.

    ``name`` is for logs and metrics (Kafka: "Produce", "Fetch", "Rebalance", ...).
    """

    def __init__(self, name: str, timer: Timer, purge_interval: int = DEFAULT_PURGE_INTERVAL,
                 timer_enabled: bool = True):
        self.name = name
        self.timer = timer
        self.purge_interval = purge_interval
        self.timer_enabled = timer_enabled
        # key -> insertion-ordered set of ops (dict with None values): O(1) removal.
        self._watchers: Dict[Hashable, Dict[DelayedOperation, None]] = {}
        self._pending = 0                   # ops handed to us and not yet completed
        self._completed_in_lists = 0        # completed ops that may still be watched
        self.purged_total = 0
        # called with each key checked, watched or not (workers/partition_states.py:
        # an owner publishes the changes of its partitions to other workers' fronts)
        self.on_check: Optional[Callable[[Hashable], None]] = None
        # key -> objects told of every check of it (`listen`): what keeps a memory of
        # a key's state learns when to forget it (workers/handlers/fetch/memo.py)
        self._listeners: Dict[Hashable, Dict[object, None]] = {}

    # -- adding ------------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable],
                                check: bool = True) -> bool:
        """Complete ``op`` now if it can (True), else watch it on ``keys`` and
        start its timeout (False). ``check=False``: the caller knows that ``op``
        cannot complete yet (it took what it counts from just now), so the first
        ``try_complete`` is skipped."""
        keys = list(keys)       # kept by an unwatch_on_complete op: its own copy
        if not keys:
            raise ValueError("try_complete_else_watch needs at least one key")
        if check and op.try_complete():
            return True
        if op._purgatory is not None and op._purgatory is not self:
            raise ValueError(f"operation already belongs to purgatory {op._purgatory.name}")
        if not op.is_completed:
            if op._purgatory is None:
                op._purgatory = self
                self._pending += 1
            watchers = self._watchers
            for key in keys:        # no setdefault: it builds a dict per key, kept or not
                ops = watchers.get(key)
                if ops is None:
                    watchers[key] = {op: None}
                else:
                    ops[op] = None
            if op.unwatch_on_complete:
                op._keys = keys
            if op.recheck_after_watch and op.try_complete():
                return True
        if not op.is_completed:
            if self.timer_enabled:
                self.timer.add(op)
            if op.is_completed:             # completed while being added: drop the timeout
                op.cancel()
        self.maybe_purge()
        return False

    def add_unwatched(self, op: DelayedOperation) -> None:
        """Count ``op`` as waiting here and start its timeout, on no watch list: its
        holder completes it (a listener of its keys, ``listen``). It must not be
        complete yet."""
        if op._purgatory is not None:
            raise ValueError(f"operation already belongs to purgatory {op._purgatory.name}")
        op._purgatory = self
        self._pending += 1
        op._keys = []       # on completion it leaves no watch list (and is not purged)
        if self.timer_enabled:
            self.timer.add(op)

    # -- listening ---------------------------------------------------------

    def listen(self, keys: Iterable[Hashable], listener) -> None:
        """Call ``listener.checked(key)`` at every ``check_and_complete`` of each of
        ``keys`` (before the ops watching it are tried), until ``unlisten``."""
        listeners = self._listeners
        for key in keys:
            ls = listeners.get(key)
            if ls is None:
                listeners[key] = {listener: None}
            else:
                ls[listener] = None

    def unlisten(self, keys: Iterable[Hashable], listener) -> None:
        listeners = self._listeners
        for key in keys:
            ls = listeners.get(key)
            if ls is not None:
                ls.pop(listener, None)
                if not ls:
                    del listeners[key]

    def listening(self, key: Hashable) -> int:
        """How many listeners ``key`` has."""
        ls = self._listeners.get(key)
        return len(ls) if ls else 0

    # -- completing --------------------------------------------------------

    def check_and_complete(self, key: Hashable) -> int:
        """Try every op watching ``key``; return how many this call completed."""
        if self.on_check is not None:
            self.on_check(key)
        listeners = self._listeners.get(key)
        if listeners:
            for listener in tuple(listeners):
                listener.checked(key)
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if not op._completed and op.try_complete_key(key):
                completed += 1
            if op.is_completed:
                self._unwatch(key, op)
        return completed

    def cancel_for_key(self, key: Hashable) -> List[DelayedOperation]:
        """Stop watching ``key`` (its partition moved away): cancel the timeouts
        of its ops without completing them; return those ops."""
        ops = self._watchers.pop(key, None)
        if not ops:
            return []
        cancelled = list(ops)
        for op in cancelled:
            op.cancel()
        return cancelled

    # -- introspection -----------------------------------------------------

    def watched(self, key: Optional[Hashable] = None) -> int:
        """Entries on ``key``'s watch list (on all lists when key is None),
        including completed ops not yet purged, as Kafka's ``watched``."""
        if key is not None:
            ops = self._watchers.get(key)
            return len(ops) if ops else 0
        return sum(len(ops) for ops in self._watchers.values())

    def watching(self, key: Hashable) -> List[DelayedOperation]:
        """The operations on ``key``'s watch list (completed ones included)."""
        ops = self._watchers.get(key)
        return list(ops) if ops else []

    def watch_keys(self) -> List[Hashable]:
        return list(self._watchers)

    @property
    def size(self) -> int:
        """Operations waiting in this purgatory (not yet completed)."""
        return self._pending

    def __len__(self) -> int:
        return self._pending

    # -- purge -------------------------------------------------------------

    def maybe_purge(self) -> int:
        if self._completed_in_lists <= self.purge_interval:
            return 0
        return self.purge_completed()

    def purge_completed(self) -> int:
        """Drop completed ops from every watch list; return entries removed."""
        purged = 0
        for key in list(self._watchers):
            ops = self._watchers[key]
            for op in [op for op in ops if op.is_completed]:
                del ops[op]
                purged += 1
            if not ops:
                del self._watchers[key]
        self._completed_in_lists = 0
        self.purged_total += purged
        return purged

    # -- internals ---------------------------------------------------------

    def _unwatch(self, key: Hashable, op: DelayedOperation) -> None:
        ops = self._watchers.get(key)
        if ops is None:
            return
        ops.pop(op, None)
        if not ops:
            del self._watchers[key]

    def _note_completed(self, op: DelayedOperation) -> None:
        self._pending -= 1
        keys = op._keys
        if keys is None:
            self._completed_in_lists += 1
            return
        op._keys = None
        watchers = self._watchers
        for key in keys:        # _unwatch, inline: a Fetch leaves every partition it read
            ops = watchers.get(key)
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    del watchers[key]

    def __repr__(self) -> str:
        return f"Purgatory({self.name!r}, pending={self._pending}, keys={len(self._watchers)})"
