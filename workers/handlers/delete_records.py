"""DeleteRecords (key 21), v0-v2: move a partition's log start offset forward.

Offset -1 means the high watermark. An offset above the high watermark is
OFFSET_OUT_OF_RANGE. Whole segments below the new start are deleted; reads below it
get OFFSET_OUT_OF_RANGE. With one replica the low watermark is ours at once (a
DelayedDeleteRecords waits for followers in cluster mode)."""
from mpbroker.protocol.errors import ErrorCode
from storage import errors as serr


def handle(broker, ctx, req):
    topics = []
    for t in req["topics"]:
        parts = []
        for rp in t["partitions"]:
            idx, offset = rp["partition_index"], rp["offset"]
            res = {"partition_index": idx, "low_watermark": -1, "error_code": 0}
            p = broker.partition(t["name"], idx)
            if p is None:
                res["error_code"] = broker.partition_error(t["name"], idx)
            elif offset < -1 or offset > p.high_watermark:
                res["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            else:
                try:
                    res["low_watermark"] = p.delete_records_before(offset)
                except serr.StorageError as e:
                    res["error_code"] = e.code
                broker.fetch_purgatory.check_and_complete(p.key)
            parts.append(res)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
