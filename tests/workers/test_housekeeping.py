"""workers/housekeeping.py: a partition's storage error during housekeeping goes to
the worker's storage-error handling; compaction steps while there is work."""
import asyncio
import errno
import types

from storage.errors import KafkaStorageError
from workers import housekeeping


class FailingLog:
    dir = "/logs/t-0"

    def maybe_flush(self, now):
        raise OSError(errno.EIO, "Input/output error")


def test_a_failing_housekeeping_job_is_a_storage_error_of_the_partition():
    seen = []
    worker = types.SimpleNamespace(on_storage_error=lambda p, e: seen.append((p, e)))
    p = types.SimpleNamespace(log=FailingLog())
    housekeeping.housekeep_partition(worker, p, 0, set())
    ((got, err),) = seen
    assert got is p and isinstance(err, KafkaStorageError) and not err.disk_full


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
