"""workers/handlers/list_offsets.py: the special timestamps per isolation level and
version, a timestamp lookup bounded by what the client may read, and the per-partition
errors (duplicates, unknown partition, fenced epoch, storage errors), v0's old-style
offsets."""
from __future__ import annotations

import types

import pytest

from mpbroker.protocol.errors import ErrorCode
from storage import errors as serr
from workers.handlers import list_offsets as lo

NS = types.SimpleNamespace


class FakeLog:
    def __init__(self, stamps):
        self.stamps = stamps                # [(offset, timestamp)]

    def offset_for_timestamp(self, ts):
        if ts == 666:
            raise serr.KafkaStorageError("disk gone")
        return next(((o, t) for o, t in self.stamps if t >= ts), None)

    def max_timestamp_offset(self):
        return max(self.stamps, key=lambda e: e[1]) if self.stamps else None


def partition(**kw):
    p = NS(log_start_offset=2, high_watermark=8, last_stable_offset=6, log_end_offset=10,
           leader_epoch=5, log=FakeLog([(2, 100), (5, 300), (7, 200), (9, 400)]),
           epoch_for_offset=lambda off: 4 if off < 5 else 5,
           leader_epoch_error=lambda epoch: ErrorCode.FENCED_LEADER_EPOCH if 0 <= epoch < 5 else 0)
    p.__dict__.update(kw)
    return p


def test_special_timestamps_per_isolation_level():
    p = partition()
    assert lo.lookup(p, lo.LATEST, 0) == (-1, 8, 5)          # read_uncommitted: the HW
    assert lo.lookup(p, lo.LATEST, 1) == (-1, 6, 5)          # read_committed: the LSO
    assert lo.lookup(p, lo.LATEST, -1) == (-1, 10, 5)        # a replica: the log end
    assert lo.lookup(p, lo.EARLIEST, 0) == lo.lookup(p, lo.EARLIEST_LOCAL, 0) == (-1, 2, 4)
    assert lo.lookup(p, lo.LATEST_TIERED, 0) == lo.lookup(p, lo.EARLIEST_PENDING_UPLOAD, 0) == (-1, -1, -1)


def test_timestamp_lookups_stop_at_what_the_client_may_read():
    p = partition()
    assert lo.lookup(p, 250, 0) == (300, 5, 5)
    assert lo.lookup(p, 350, 0) == (-1, -1, -1)              # offset 9 is past the HW
    assert lo.lookup(p, 500, 0) == (-1, -1, -1)              # nothing that late
    assert lo.lookup(p, lo.MAX_TIMESTAMP, 0) == (-1, -1, -1)             # offset 9 again
    assert lo.lookup(partition(high_watermark=10), lo.MAX_TIMESTAMP, 0) == (400, 9, 5)
    assert lo.lookup(partition(last_stable_offset=5), 250, 1) == (-1, -1, -1)


@pytest.mark.parametrize("timestamp,first", [(-1, 0), (-2, 0), (-3, 7), (-4, 8), (-5, 9), (-6, 11),
                                             (-7, None)])
def test_special_timestamps_need_their_first_version(timestamp, first):
    for version in range(12):
        assert lo.timestamp_unsupported(timestamp, version) == (first is None or version < first)
    assert not lo.timestamp_unsupported(0, 0)


def answer(version, partitions, broker=None, **req):
    broker = broker or NS(partition=lambda t, i: partition() if i < 4 else None,
                          partition_error=lambda t, i: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    resp = lo.handle(broker, NS(api_version=version),
                     {"topics": [{"name": "t", "partitions": partitions}], **req})
    return resp["topics"][0]["partitions"]


def test_errors_per_partition():
    parts = answer(7, [{"partition_index": 0, "timestamp": -1},
                       {"partition_index": 0, "timestamp": -2},      # named twice
                       {"partition_index": 1, "timestamp": -3, "current_leader_epoch": 3},
                       {"partition_index": 2, "timestamp": -4},      # v8+
                       {"partition_index": 5, "timestamp": -1},      # not here
                       {"partition_index": 3, "timestamp": 666}])    # the log fails
    assert [p["error_code"] for p in parts] == [
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST, ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.KAFKA_STORAGE_ERROR]


def test_v0_old_style_offsets_and_a_replica_sees_the_log_end():
    (p,) = answer(0, [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 3}])
    assert p["old_style_offsets"] == [8] and p["offset"] == 8
    (p,) = answer(0, [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 0}])
    assert p["old_style_offsets"] == []
    (p,) = answer(1, [{"partition_index": 0, "timestamp": -1}], replica_id=2, isolation_level=1)
    assert p["offset"] == 10 and p["old_style_offsets"] == []
