"""Keep a worker's long-lived objects out of the cyclic garbage collector's full scans.

CPython's full (generation 2) collection walks every tracked object of the heap. A
worker's heap is mostly long-lived: modules, metadata, and per hosted partition its
Partition, Log, segments, indexes and producer state. Measured under the 1k-latency
workload (100 partitions, 2,000 records/s of 1 KiB, two workers): a full collection every
2-3 s, each pausing the worker's loop for up to 63 ms, 0.5 s of pauses in 25 s, and those
pauses were the end-to-end p99 (57 ms; 10 ms without them).

`GcFreezer.refreeze` runs a collection and then `gc.freeze()`: what survived moves to the
permanent generation, which later collections do not scan (the pre-fork trick of
CPython's `gc.freeze` documentation). Young objects are collected as before; a later full
collection only walks what became long-lived since the last refreeze.

When (the worker process only, workers/main.py; a Worker built in a test process never
freezes anything):

* once the worker has booted (`refreeze`);
* about `DEBOUNCE_S` after the hosted partitions change (`changed`: a partition opened,
  closed or deleted), at most once per `DEBOUNCE_S`, so a CreateTopics of thousands of
  partitions costs a few refreezes, not one per partition;
* every `PERIOD_S` (`tick`, from the housekeeping loop): objects that became long-lived
  meanwhile (groups, producer states, connections) join the frozen set.

A full refreeze (at boot, periodic, after a partition was closed) unfreezes first, so its
collection also frees frozen objects that became cyclic garbage since (a deleted
partition's, a closed connection's): such garbage lives at most until the next full
refreeze. It pauses the loop as long as the full collections used to (20-30 ms with the
workload above), on those occasions only. After partitions were only added the refreeze
is light: it collects and freezes what is not frozen yet, without walking the frozen
heap.
"""
from __future__ import annotations

import gc
import logging
import time
from typing import Callable

log = logging.getLogger(__name__)

DEBOUNCE_S = 1.0
PERIOD_S = 300.0


class GcFreezer:
    def __init__(self, call_later: Callable | None = None,
                 clock: Callable[[], float] = time.monotonic, collector=gc):
        self.call_later = call_later          # loop.call_later (None: no debounced refreeze)
        self.clock = clock
        self.gc = collector
        self.enabled = False                  # set by the first refreeze (the worker booted)
        self.last = 0.0
        self.refreezes = 0
        self._pending = None
        self._full = False                    # the pending refreeze unfreezes first

    def refreeze(self, full: bool = True) -> None:
        """A collection of everything (`full`: frozen objects included; else what is not
        frozen yet), then freeze the survivors."""
        self._pending = None
        self._full = False
        started = time.perf_counter()
        if full:
            self.gc.unfreeze()
        self.gc.collect()
        self.gc.freeze()
        self.enabled = True
        self.last = self.clock()
        self.refreezes += 1
        log.debug("gc: %d objects frozen in %.1f ms", self.gc.get_freeze_count(),
                  (time.perf_counter() - started) * 1000)

    def changed(self, removed: bool = False) -> None:
        """The hosted partitions changed (`removed`: one was closed): refreeze once
        things settle."""
        if not self.enabled or self.call_later is None:
            return
        self._full = self._full or removed
        if self._pending is None:
            self._pending = self.call_later(DEBOUNCE_S, lambda: self.refreeze(self._full))

    def tick(self) -> None:
        """Periodic: refreeze when the last one is PERIOD_S old."""
        if self.enabled and self._pending is None and self.clock() - self.last >= PERIOD_S:
            self.refreeze()

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
