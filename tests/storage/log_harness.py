"""Helpers of the Log tests (test_log*.py): a settable clock, record batches, a small
segment config, a log opened in a temporary directory, all its records."""
from storage.batch import BatchBuilder, iter_batches
from storage.log import Log, LogConfig


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


def batch(n=2, ts=None, value=b"x" * 60, pid=-1, epoch=-1, seq=-1, key=b"k", offset=0,
          compression=0):
    b = BatchBuilder(offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     compression=compression)
    for i in range(n):
        b.append(key, value, timestamp=ts if ts is not None else 1_000_000 + i)
    return bytearray(b.build())


def small_config(**kw):
    base = dict(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=8 * 32,
                file_delete_delay_ms=0)
    base.update(kw)
    return LogConfig(**base)


def all_records(log, start=None):
    data = log.read_records_bytes(log.log_start_offset if start is None else start)
    return [(r.offset, r.key, r.value) for b in iter_batches(data) for r in b.records()]


def open_log(tmp_path, clock, **kw):
    return Log.open(str(tmp_path / "topic-0"), small_config(**kw), clock)
