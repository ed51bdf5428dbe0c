"""Kafka's hierarchical timing wheel: O(1) insert and cancel of timeouts.

This is the structure of Kafka's ``TimingWheel`` / ``TimerTaskList`` /
``SystemTimer`` (server-common ``org.apache.kafka.server.util.timer``), for one
single-threaded asyncio worker.

Structure
---------
A wheel is a ring of ``wheel_size`` *buckets*; each bucket is a circular doubly
linked list of entries (``TimerTaskList``) and covers ``tick_ms`` of time, so the
wheel covers ``interval = tick_ms * wheel_size``. ``current_time_ms`` (a multiple
of ``tick_ms``) splits the wheel into an expired part (the bucket it points at)
and a future part ``[current_time_ms + tick_ms, current_time_ms + interval)``.

A task whose expiration is beyond the interval goes to an *overflow wheel*
created lazily on demand, whose tick is the whole interval of the wheel below
(tick 1 ms, size 20: levels of 1 ms, 20 ms, 400 ms, 8000 ms, ...). Buckets of
every level share one priority queue ordered by bucket expiration (Kafka's
``DelayQueue``; here a heap): only buckets are queued, never tasks, so the queue
holds at most ``wheel_size`` items per level.

Example (Kafka's javadoc, tick 1 ms, size 20, u = current time)::

    level 1: [u, u+20)    1 ms buckets
    level 2: [u, u+400)   20 ms buckets   (created when a task needs it)
    level 3: [u, u+8000)  400 ms buckets

At u = 0 a task due at 2 ms goes into level-1 bucket 2 (expiration 2). A task
due at 350 ms is beyond level 1, so it goes into level-2 bucket 17, which
expires at 340. A task due at 450 ms goes into level-3 bucket 1, which expires
at 400 (together with every task due in [400, 800)). When the clock reaches
400 that bucket is *flushed*: each of its tasks is re-inserted. The 450 ms task
now lands, with u = 400, in level-2 bucket 2 (expiration 440); at 440 it is
re-inserted again into level-1 bucket 10 (expiration 450); at 450 it fires.
A task is only ever run by the lowest wheel, so it fires at the granularity of
the lowest tick whatever level it was first stored on.

Firing rule and bound
---------------------
``Timer.add`` computes ``expiration = clock() + task.delay_ms``. A wheel stores
an entry only if ``expiration >= current_time_ms + tick_ms``; otherwise the
entry is expired and is run (Kafka hands it to an executor; here it is queued
and run by the next ``advance_clock`` so ``add`` never calls back into its
caller). ``advance_clock(now_ms)`` pops every bucket with expiration <=
``now_ms``, advances the wheels to that bucket's expiration and re-inserts its
entries (Kafka's ``bucket.flush(addTimerTaskEntry)``).

The bound Kafka gives: a task is run by the first ``advance_clock(now_ms)`` call
made after it was added with ``now_ms >= floor(expiration / tick_ms) * tick_ms``
(the start of the lowest-level tick holding its expiration). So it may fire up
to ``tick_ms - 1`` ms before its expiration, never earlier; with ``tick_ms = 1``
it never fires early. It is never late beyond the caller's own lateness in
calling ``advance_clock``.

Cancel and re-add
-----------------
A task points at its current entry; ``cancel()`` unlinks that entry from its
bucket in O(1). Adding a task that is already pending replaces its entry (the
old one is unlinked). An entry whose task no longer points at it is
*cancelled* and is dropped instead of run.

Concurrency contract
--------------------
Single-threaded: one Timer per worker, used only from the worker's event loop
thread. No locks. ``run()`` of a task may add, cancel and re-add tasks of the
same Timer (including itself); those take effect for buckets processed later in
the same ``advance_clock`` call.
"""
from __future__ import annotations

import heapq
import logging
import time
from typing import Callable, Optional

__all__ = ["TimerTask", "CallbackTask", "Timer", "TimingWheel", "TimerTaskList", "TimerTaskEntry"]

log = logging.getLogger(__name__)


def _system_clock() -> int:
    # Monotonic, as Kafka's SystemTimer (Time.hiResClockMs): a wall-clock step must
    # neither fire every timeout at once nor hold them back.
    return int(time.monotonic() * 1000)


class TimerTask:
    """A task to run once after ``delay_ms``. Subclasses override ``run()``."""

    __slots__ = ("delay_ms", "_entry")

    def __init__(self, delay_ms: int):
        self.delay_ms = int(delay_ms)
        self._entry: Optional[TimerTaskEntry] = None

    def run(self) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        """Unlink from the timer (O(1)). A no-op once run or never added."""
        entry = self._entry
        if entry is not None:
            entry.remove()
        self._entry = None

    def _set_entry(self, entry: "TimerTaskEntry") -> None:
        # A task is in at most one entry: adding it again replaces the old one.
        old = self._entry
        if old is not None and old is not entry:
            old.remove()
        self._entry = entry


class CallbackTask(TimerTask):
    """A TimerTask that calls ``fn()``."""

    __slots__ = ("_fn",)

    def __init__(self, delay_ms: int, fn: Callable[[], object]):
        super().__init__(delay_ms)
        self._fn = fn

    def run(self) -> None:
        self._fn()


class TimerTaskEntry:
    """One node of a bucket's list: a task and the absolute expiration."""

    __slots__ = ("task", "expiration_ms", "list", "next", "prev")

    def __init__(self, task: TimerTask, expiration_ms: int):
        self.task = task
        self.expiration_ms = expiration_ms
        self.list: Optional[TimerTaskList] = None
        self.next: Optional[TimerTaskEntry] = None
        self.prev: Optional[TimerTaskEntry] = None
        task._set_entry(self)

    @property
    def cancelled(self) -> bool:
        return self.task._entry is not self

    def remove(self) -> None:
        lst = self.list
        if lst is not None:
            lst.remove(self)


class TimerTaskList:
    """A bucket: circular doubly linked list with a sentinel, plus the bucket's
    expiration (-1 when it holds nothing queued)."""

    __slots__ = ("_root", "_counter", "expiration_ms", "__weakref__")

    def __init__(self, counter: list):
        root = TimerTaskEntry.__new__(TimerTaskEntry)
        root.task = None
        root.expiration_ms = -1
        root.list = None
        root.next = root
        root.prev = root
        self._root = root
        self._counter = counter     # shared one-element list: the Timer's size
        self.expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket expiration; True if it changed (the bucket must be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def __bool__(self) -> bool:
        return self._root.next is not self._root

    def __iter__(self):
        node = self._root.next
        while node is not self._root:
            nxt = node.next
            yield node
            node = nxt

    def add(self, entry: TimerTaskEntry) -> None:
        entry.remove()      # an entry lives in one list at a time
        root = self._root
        tail = root.prev
        entry.next = root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        root.prev = entry
        self._counter[0] += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.list is self:
            entry.next.prev = entry.prev
            entry.prev.next = entry.next
            entry.next = entry.prev = None
            entry.list = None
            self._counter[0] -= 1

    def drain(self) -> list:
        """Unlink every entry and reset the expiration; return the entries.

        Kafka's flush() applies the callback while unlinking; we detach first
        so a callback that adds to this very bucket cannot loop forever.
        """
        entries = []
        root = self._root
        node = root.next
        while node is not root:
            nxt = node.next
            node.next = node.prev = None
            node.list = None
            entries.append(node)
            node = nxt
        root.next = root.prev = root
        self._counter[0] -= len(entries)
        self.expiration_ms = -1
        return entries


class TimingWheel:
    """One level of the hierarchy. See the module docstring."""

    __slots__ = ("tick_ms", "wheel_size", "interval", "current_time_ms",
                 "_buckets", "_counter", "_queue", "_overflow")

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, counter: list, queue: "_BucketQueue"):
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval = tick_ms * wheel_size
        self.current_time_ms = start_ms - (start_ms % tick_ms)   # rounded down to a tick
        self._counter = counter
        self._queue = queue
        self._buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self._overflow: Optional[TimingWheel] = None

    @property
    def overflow_wheel(self) -> Optional["TimingWheel"]:
        return self._overflow

    def add(self, entry: TimerTaskEntry) -> bool:
        """Store the entry; False if it is cancelled or already expired."""
        wheel = self
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        while True:
            if expiration < wheel.current_time_ms + wheel.tick_ms:
                return False
            if expiration < wheel.current_time_ms + wheel.interval:
                virtual_id = expiration // wheel.tick_ms
                bucket = wheel._buckets[virtual_id % wheel.wheel_size]
                bucket.add(entry)
                # The bucket is queued once per expiration; a bucket is only
                # reused for a new expiration after it has been flushed.
                if bucket.set_expiration(virtual_id * wheel.tick_ms):
                    wheel._queue.push(bucket)
                return True
            if wheel._overflow is None:
                wheel._overflow = TimingWheel(wheel.interval, wheel.wheel_size,
                                              wheel.current_time_ms, wheel._counter, wheel._queue)
            wheel = wheel._overflow

    def advance_clock(self, time_ms: int) -> None:
        wheel = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - (time_ms % wheel.tick_ms)
            wheel = wheel._overflow


class _BucketQueue:
    """Buckets ordered by expiration (Kafka's DelayQueue of TimerTaskLists)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self):
        self._heap: list = []
        self._seq = 0

    def push(self, bucket: TimerTaskList) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (bucket.expiration_ms, self._seq, bucket))

    def peek_expiration(self) -> Optional[int]:
        heap = self._heap
        while heap and heap[0][2].expiration_ms != heap[0][0]:
            heapq.heappop(heap)          # stale: flushed and re-queued since
        return heap[0][0] if heap else None

    def poll(self, now_ms: int) -> Optional[TimerTaskList]:
        expiration = self.peek_expiration()
        if expiration is None or expiration > now_ms:
            return None
        return heapq.heappop(self._heap)[2]

    def __len__(self) -> int:
        return len(self._heap)


class Timer:
    """Kafka's SystemTimer without threads: the caller drives the clock.

    ``add(task)``: schedule at ``clock() + task.delay_ms``.
    ``advance_clock(now_ms)``: run every task due by ``now_ms``; returns how many ran.
    ``next_expiration_ms()``: the earliest bucket expiration (or, when expired
    tasks wait to run, a time <= now), None when nothing is scheduled; arm one
    loop timer for it.
    ``size``: tasks scheduled and not yet run or cancelled.
    """

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, clock: Callable[[], int] = _system_clock):
        if tick_ms < 1:
            raise ValueError("tick_ms must be >= 1")
        if wheel_size < 2:
            raise ValueError("wheel_size must be >= 2")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.clock = clock
        self._counter = [0]
        self._queue = _BucketQueue()
        self._wheel = TimingWheel(tick_ms, wheel_size, clock(), self._counter, self._queue)
        # Entries found expired by add(): run by the next advance_clock (Kafka's
        # taskExecutor.submit). A list so cancel() stays O(1).
        self._ready = TimerTaskList(self._counter)
        # Called with no arguments after every add(), so a driver (LoopTimer)
        # can re-arm its one loop timer when the earliest expiration moved up.
        self.on_add: Optional[Callable[[], None]] = None

    @property
    def size(self) -> int:
        return self._counter[0]

    def __len__(self) -> int:
        return self._counter[0]

    @property
    def wheel(self) -> TimingWheel:
        return self._wheel

    def add(self, task: TimerTask) -> None:
        entry = TimerTaskEntry(task, self.clock() + task.delay_ms)
        if not self._wheel.add(entry) and not entry.cancelled:
            ready = self._ready
            if not ready or entry.expiration_ms < ready.expiration_ms:
                ready.expiration_ms = entry.expiration_ms
            ready.add(entry)
        if self.on_add is not None:
            self.on_add()

    def next_expiration_ms(self) -> Optional[int]:
        if self._ready:
            return min(self._ready.expiration_ms, self._wheel.current_time_ms)
        return self._queue.peek_expiration()

    def advance_clock(self, now_ms: int) -> int:
        fired = 0
        if self._ready:
            for entry in self._ready.drain():
                fired += self._run(entry)
        bucket = self._queue.poll(now_ms)
        while bucket is not None:
            self._wheel.advance_clock(bucket.expiration_ms)
            for entry in bucket.drain():
                fired += self._reinsert(entry)
            bucket = self._queue.poll(now_ms)
        return fired

    def _reinsert(self, entry: TimerTaskEntry) -> int:
        # Kafka's addTimerTaskEntry: store on a lower level, or run if due.
        if entry.cancelled or self._wheel.add(entry):
            return 0
        return self._run(entry)

    def _run(self, entry: TimerTaskEntry) -> int:
        if entry.cancelled:
            return 0
        try:
            entry.task.run()
        except Exception:       # a task's bug must not stop the other timeouts
            log.exception("timer task %r failed", entry.task)
        return 1
