"""A partition replica owned by this worker: its log plus the replication state.

Owner: exactly one worker process (the placement map says which); only that process
calls `append`. Offsets kept here, with the invariant checked on every change:

    log_start_offset <= high_watermark <= log_end_offset

With one replica (the embedded default) the high watermark follows the log end offset
right after every append; DelayedProduce (acks=-1) still waits on the high watermark,
through the same purgatory that replication completes when followers catch up.

`bytes_appended` only grows: a DelayedFetch remembers it when it starts waiting and
counts the difference towards `fetch.min.bytes`, which avoids asking the log for byte
positions on every check.
"""
from __future__ import annotations

from storage.log import Log


class Partition:
    def __init__(self, topic: str, index: int, topic_id: bytes, log: Log,
                 leader_epoch: int = 0, leader_id: int = -1):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.leader_epoch = leader_epoch
        self.leader_id = leader_id
        log.update_high_watermark(log.log_end_offset)  # one replica: all of it is committed
        self.bytes_appended = 0
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.closed = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        # No open transactions yet (transactions issue): the LSO is the high watermark.
        return self.high_watermark

    def append(self, records: memoryview):
        info = self.log.append(records, self.leader_epoch)
        if not info.duplicate:
            self.bytes_appended += len(records)
            self.bytes_in += len(records)
            self.messages_in += info.record_count
        self._maybe_increment_high_watermark()
        return info

    def _maybe_increment_high_watermark(self) -> None:
        # Single replica: the ISR is {self}, so everything appended is committed.
        leo = self.log.log_end_offset
        if leo > self.log.high_watermark:
            self.log.update_high_watermark(leo)

    def _check(self) -> None:
        assert self.log.log_start_offset <= self.high_watermark <= self.log.log_end_offset, (
            self.topic, self.index, self.log.log_start_offset, self.high_watermark,
            self.log.log_end_offset)

    def read(self, offset: int, max_bytes: int, isolation_level: int = 0,
             min_one_batch: bool = True):
        upper = self.high_watermark if isolation_level == 0 else self.last_stable_offset
        return self.log.read(offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)

    def epoch_for_offset(self, offset: int) -> int:
        return self.log.epoch_cache.epoch_for_offset(offset)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: offset -1 means the high watermark. Returns the new low watermark."""
        if offset == -1:
            offset = self.high_watermark
        self.log.delete_records_before(offset)
        self._check()
        return self.log.log_start_offset

    def close(self) -> None:
        self.closed = True
        self.log.close()

    def delete(self) -> None:
        self.closed = True
        self.log.delete()
