"""ListOffsets (key 2), v0-v11.

Special timestamps: -1 latest (high watermark, or the last stable offset for
read_committed; the log end offset for a replica_id other than -1, as Kafka), -2
earliest (log start offset), -3 the offset of the max timestamp (v7+), -4 earliest
local (v8+: = earliest, no tiered storage), -5 latest tiered (v9+) and -6 earliest
pending upload (v11+, KIP-1023): no tiered storage, so -1/-1. Any other negative
timestamp, or one below its first version, is UNSUPPORTED_VERSION (Kafka 4's
ReplicaManager.isListOffsetsTimestampUnsupported). Any other timestamp: the first
offset whose timestamp is >= it, or -1/-1 when there is none. v0 answers
`old_style_offsets` (at most `max_num_offsets` of them: the chosen offset).

A partition named twice in one request (v1+) answers INVALID_REQUEST for every
occurrence, as Kafka does.
"""
from mpbroker.protocol.errors import ErrorCode
from storage import errors as serr

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
EARLIEST_PENDING_UPLOAD = -6
# the first version that may carry each special timestamp
MIN_VERSION = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
               EARLIEST_PENDING_UPLOAD: 11}


def lookup(p, timestamp: int, isolation_level: int) -> tuple[int, int, int]:
    """(timestamp, offset, leader_epoch) for one partition."""
    if timestamp == LATEST:
        if isolation_level < 0:     # a replica (or debug) asks: the log end offset
            off = p.log_end_offset
        else:
            off = p.high_watermark if isolation_level == 0 else p.last_stable_offset
        return -1, off, p.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        off = p.log_start_offset
        return -1, off, p.epoch_for_offset(off)
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = p.log.max_timestamp_offset()
    else:
        found = p.log.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1, -1
    off, ts = found
    if off >= (p.high_watermark if isolation_level == 0 else p.last_stable_offset):
        return -1, -1, -1
    return ts, off, p.epoch_for_offset(off)


def timestamp_unsupported(timestamp: int, version: int) -> bool:
    return timestamp < 0 and version < MIN_VERSION.get(timestamp, 1 << 15)


def _duplicates(req, version: int) -> set:
    if version < 1:
        return set()
    seen, dupes = set(), set()
    for t in req["topics"]:
        for rp in t["partitions"]:
            key = (t["name"], rp["partition_index"])
            (dupes if key in seen else seen).add(key)
    return dupes


def handle(broker, ctx, req):
    version = ctx.api_version
    isolation = req.get("isolation_level", 0)
    if req.get("replica_id", -1) != -1:
        isolation = -1              # followers see up to the log end (Kafka: no isolation)
    dupes = _duplicates(req, version)
    topics = []
    for t in req["topics"]:
        parts = []
        for rp in t["partitions"]:
            idx = rp["partition_index"]
            res = {"partition_index": idx, "error_code": 0, "old_style_offsets": [],
                   "timestamp": -1, "offset": -1, "leader_epoch": -1}
            p = broker.partition(t["name"], idx)
            if (t["name"], idx) in dupes:
                res["error_code"] = ErrorCode.INVALID_REQUEST
            elif timestamp_unsupported(rp["timestamp"], version):
                res["error_code"] = ErrorCode.UNSUPPORTED_VERSION
            elif p is None:
                res["error_code"] = broker.partition_error(t["name"], idx)
            elif fenced := p.leader_epoch_error(rp.get("current_leader_epoch", -1)):
                res["error_code"] = fenced
            else:
                try:
                    ts, off, epoch = lookup(p, rp["timestamp"], isolation)
                except serr.StorageError as e:
                    res["error_code"] = e.code
                else:
                    res.update(timestamp=ts, offset=off, leader_epoch=epoch)
                    if version == 0:
                        n = rp.get("max_num_offsets", 1)
                        res["old_style_offsets"] = [off][:max(n, 0)] if off >= 0 else []
            parts.append(res)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
