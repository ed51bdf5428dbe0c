"""workers/housekeeping.py: a partition's storage error during housekeeping goes to
the worker's storage-error handling; compaction steps while there is work, with the
settings of the broker config."""
import asyncio
import errno
import types

from mpbroker import config as configmod
from storage.cleaner import map_entries_for
from storage.errors import KafkaStorageError
from workers import housekeeping


class FailingLog:
    dir = "/logs/t-0"
    log_start_offset = 0

    def maybe_flush(self, now):
        raise OSError(errno.EIO, "Input/output error")


def test_a_failing_housekeeping_job_is_a_storage_error_of_the_partition():
    seen = []
    worker = types.SimpleNamespace(on_storage_error=lambda p, e: seen.append((p, e)))
    p = types.SimpleNamespace(log=FailingLog(), closed=False)
    housekeeping.housekeep_partition(worker, p, 0, set())
    ((got, err),) = seen
    assert got is p and isinstance(err, KafkaStorageError) and not err.disk_full


def test_retention_that_moves_the_log_start_checks_the_partitions_fetch_waiters():
    """Fronts that copy the partition's state (workers/partition_states.py) hear of the
    new log start through the check of its key."""
    class Log:
        config = types.SimpleNamespace(delete=True)
        log_start_offset = 0
        maybe_flush = maybe_roll = delete_expired_files = lambda self, now: None

        def enforce_retention(self, now):
            self.log_start_offset = now

    checked = []
    worker = types.SimpleNamespace(
        fetch_purgatory=types.SimpleNamespace(check_and_complete=checked.append))
    p = types.SimpleNamespace(key=("t", 0), log=Log(), _check=lambda: None)
    housekeeping.housekeep_partition(worker, p, 0, {"retention"})     # nothing deleted
    housekeeping.housekeep_partition(worker, p, 5, set())             # retention not due
    assert checked == []
    housekeeping.housekeep_partition(worker, p, 5, {"retention"})
    assert checked == [("t", 0)]


def test_a_segment_ms_roll_checks_the_partitions_fetch_waiters():
    """Fronts read new batches from the active segment the owner published: they hear
    of the new one (and stop reading the old one, which compaction may rewrite)."""
    class Log:
        config = types.SimpleNamespace(delete=False)
        log_start_offset = 0
        rolls = [False, True]
        maybe_flush = delete_expired_files = lambda self, now: None

        def maybe_roll(self, now):
            return self.rolls.pop(0)

    checked = []
    worker = types.SimpleNamespace(
        fetch_purgatory=types.SimpleNamespace(check_and_complete=checked.append))
    p = types.SimpleNamespace(key=("t", 0), log=Log())
    housekeeping.housekeep_partition(worker, p, 0, set())
    assert checked == []
    housekeeping.housekeep_partition(worker, p, 1, set())
    assert checked == [("t", 0)]


def test_clean_logs_stops_when_the_cleaner_has_nothing_left():
    steps = []

    class Cleaners:
        def step(self, logs, now, budget_ms):
            steps.append((sorted(logs), budget_ms))
            return len(steps) < 3

    p = types.SimpleNamespace(key=("t", 0), log="log", closed=False, moving=False)
    moving = types.SimpleNamespace(key=("t", 1), log="log", closed=False, moving=True)
    worker = types.SimpleNamespace(partitions={p.key: p}, followers={moving.key: moving},
                                   cleaners=Cleaners())
    asyncio.run(housekeeping.clean_logs(worker, 0))
    assert steps == [([("t", 0)], 5)] * 3


def cfg(tmp_path, **overrides):
    text = f"broker.id=1\nlog.dirs={tmp_path}\nlisteners=PLAINTEXT://127.0.0.1:9092\n"
    return configmod.BrokerConfig.from_text(text, [f"{k}={v}" for k, v in overrides.items()])


def test_cleaner_settings_come_from_the_broker_config(tmp_path):
    m = housekeeping.cleaner_manager(cfg(tmp_path, **{"num.workers": 4,
                                                 "log.cleaner.dedupe.buffer.size": 64 << 20,
                                                 "log.cleaner.backoff.ms": 700}))
    # the dedupe buffer is shared by the workers, as Kafka shares it by cleaner threads
    assert m.max_map_entries == map_entries_for(16 << 20, 0.9)
    assert m.backoff_ms == 700 and m.enabled
    off = housekeeping.cleaner_manager(cfg(tmp_path, **{"log.cleaner.enable": "false"}))
    assert not off.enabled


def test_retention_that_moved_the_log_start_before_a_job_failed_is_checked_all_the_same():
    """A checkpoint that fails on a full disk after retention moved the log start: the
    storage error goes to the worker, and the partition's key is checked (waiters and
    memories of its state, workers/handlers/fetch/memo.py, learn of the new start)."""
    class Log:
        config = types.SimpleNamespace(delete=True)
        dir = "/logs/t-0"
        log_start_offset = 0
        maybe_flush = maybe_roll = delete_expired_files = lambda self, now: None

        def enforce_retention(self, now):
            self.log_start_offset = 7

        def checkpoint(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    checked, seen = [], []
    worker = types.SimpleNamespace(
        fetch_purgatory=types.SimpleNamespace(check_and_complete=checked.append),
        on_storage_error=lambda p, e: seen.append(e))
    p = types.SimpleNamespace(key=("t", 0), log=Log(), _check=lambda: None, closed=False)
    housekeeping.housekeep_partition(worker, p, 5, {"retention", "checkpoint"})
    assert len(seen) == 1 and seen[0].disk_full
    assert checked == [("t", 0)]
    housekeeping.housekeep_partition(worker, p, 6, {"checkpoint"})   # failing, start still
    assert len(seen) == 2 and checked == [("t", 0)]
