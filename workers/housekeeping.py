"""The periodic work of a worker's logs (Kafka's KafkaScheduler jobs), on the worker's
loop: flush.ms, segment.ms rolls, retention, recovery-point checkpoints, producer-id
expiry, deleting files renamed `.deleted`, compaction of compacted topics in slices of
a few ms so appends never wait long, the ISR check, and the retries of what failed
for want of room or of the controller (log opens, offline-replica reports).

`run(worker)` is the worker's housekeeping task (workers/worker.py `start`); a tick is
at most a second (`log.flush.scheduler.interval.ms`), the loop is let in between
partitions and compaction slices. A replica moving between log dirs is left alone.
"""
from __future__ import annotations

import asyncio
import logging
import os

from storage.cleaner import CleanerManager, map_entries_for
from storage.errors import KafkaStorageError

log = logging.getLogger(__name__)

CLEAN_SLICES = 10           # compaction slices of 5 ms per housekeeping tick (of 1 s)


def cleaner_manager(cfg) -> CleanerManager:
    """Compaction of this worker's logs (storage/cleaner.py): the worker's share of
    `log.cleaner.dedupe.buffer.size` (split evenly between the workers, as Kafka
    splits it between its cleaner threads) bounds the one offset map alive."""
    workers = max(1, getattr(cfg, "num_workers", None) or os.cpu_count() or 1)
    share = cfg["log.cleaner.dedupe.buffer.size"] // workers
    return CleanerManager(
        max_map_entries=map_entries_for(
            share, cfg["log.cleaner.io.buffer.load.factor"]),
        backoff_ms=cfg["log.cleaner.backoff.ms"],
        enabled=bool(cfg["log.cleaner.enable"]))


def _served(worker) -> list:
    """The worker's open logs' partitions (led and followed)."""
    return list(worker.partitions.values()) + list(worker.followers.values())


async def run(worker) -> None:
    """The housekeeping loop of `worker` (cancelled by its shutdown)."""
    cfg = worker.config
    tick_ms = min(cfg["log.flush.scheduler.interval.ms"] or 1000, 1000)
    every = {"retention": cfg["log.retention.check.interval.ms"],
             "checkpoint": cfg["log.flush.offset.checkpoint.interval.ms"],
             "producers": cfg["producer.id.expiration.check.interval.ms"]}
    last = {k: worker.clock() for k in every}
    while True:
        await asyncio.sleep(tick_ms / 1000)
        now = worker.clock()
        due = {k for k, ms in every.items() if ms > 0 and now - last[k] >= ms}
        for k in due:
            last[k] = now
        worker.retry_opens()
        worker.gc_freezer.tick()        # long-lived objects out of full collections
        worker.report_offline()         # again, if the controller could not be told
        for p in _served(worker):
            if p.closed or p.moving:    # a replica moving between log dirs is left alone
                continue
            try:
                housekeep_partition(worker, p, now, due)
            except Exception:
                log.exception("housekeeping of %s-%d", p.topic, p.index)
            await asyncio.sleep(0)  # let requests in between partitions
        await clean_logs(worker, now)
        try:
            worker.replication.check_isr(now)       # replica.lag.time.max.ms
        except Exception:
            log.exception("ISR check")


def housekeep_partition(worker, p, now: int, due: set) -> None:
    """One partition's due jobs; a storage error goes to the worker's handling."""
    start = p.log.log_start_offset
    try:
        changed = _housekeep_log(p, now, due)
    except (OSError, KafkaStorageError) as e:
        err = e if isinstance(e, KafkaStorageError) else \
            KafkaStorageError.from_os_error(f"housekeeping of {p.log.dir}", e)
        worker.on_storage_error(p, err)
        # a job that failed after retention moved the log start (a checkpoint on a
        # full disk): the change is checked all the same
        changed = not p.closed and p.log.log_start_offset != start
    if changed:     # fronts hear of the new log start or active segment
        worker.fetch_purgatory.check_and_complete(p.key)


def _housekeep_log(p, now: int, due: set) -> bool:
    """The due jobs of `p`'s log; whether its log start or active segment changed (the
    state fronts read its files by, workers/partition_states.py)."""
    lg = p.log
    lg.maybe_flush(now)
    changed = lg.maybe_roll(now)
    lg.delete_expired_files(now)
    if "retention" in due and lg.config.delete:
        start = lg.log_start_offset
        lg.enforce_retention(now)
        p._check()
        changed = changed or lg.log_start_offset != start
    if "checkpoint" in due:
        lg.checkpoint()
    if "producers" in due:
        lg.producer_state.remove_expired_producers(now)
    return changed


async def clean_logs(worker, now: int) -> None:
    """Compaction slices of 5 ms, the loop let in between, at most CLEAN_SLICES per
    tick: a pass never holds the worker long, and costs it at most ~5%."""
    for _ in range(CLEAN_SLICES):
        logs = {p.key: p.log for p in _served(worker) if not p.closed and not p.moving}
        if not worker.cleaners.step(logs, now, budget_ms=5):
            return
        await asyncio.sleep(0)
