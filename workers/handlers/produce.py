"""Produce (key 0), v0-v11.

Per partition: validate and append the batch to the owner's log (offsets assigned in
place, CRC checked, idempotent producer state checked), then answer according to acks:
0 no response at all, 1 once the leader appended, -1 once the high watermark covers the
batch (a DelayedProduce in the produce purgatory, expired after `timeout_ms` with
REQUEST_TIMED_OUT). Errors are per partition; the request never fails as a whole except
for bad acks (INVALID_REQUIRED_ACKS on every partition).

Record formats (storage/convert.py): v0-v2 may carry magic 0/1 message sets, converted
to one v2 batch; v3-v6 may not use zstd; a topic compression.type other than
`producer` recompresses. Compacted topics answer INVALID_RECORD with one record error
per keyless record (v8+ `record_errors`).
"""
from __future__ import annotations

import asyncio

from mpbroker.protocol.errors import ErrorCode
from storage import convert
from storage import errors as serr

from workers.purgatory import DelayedOperation

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def _partition_result(index, error_code, base_offset=-1, log_append_time_ms=-1,
                      log_start_offset=-1, error_message=None, record_errors=()):
    return {"index": index, "error_code": error_code, "base_offset": base_offset,
            "log_append_time_ms": log_append_time_ms, "log_start_offset": log_start_offset,
            "record_errors": list(record_errors), "error_message": error_message}


def append_one(broker, topic: str, index: int, records, version: int, transactional_id):
    """Append to one partition we own; returns (result dict, partition or None, last offset)."""
    p = broker.partition(topic, index)
    if p is None:
        return _partition_result(index, broker.partition_error(topic, index)), None, -1
    if topic in INTERNAL_TOPICS:
        return _partition_result(index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 error_message="Cannot append to internal topic"), None, -1
    if records is None or len(records) == 0:
        return _partition_result(index, ErrorCode.INVALID_RECORD,
                                 error_message="Produce request carries no records"), None, -1
    try:
        # v0-v2 magic 0/1 sets are converted, batches recompressed to the topic's
        # compression.type; magic-2 batches of v7+ clients pass untouched (storage/convert.py)
        info = p.append(convert.prepare_produce(records, version, p.log.config, broker.clock()))
    except serr.StorageError as e:
        rec_errors = [{"batch_index": i, "batch_index_error_message": m}
                      for i, m in getattr(e, "record_errors", None) or ()]
        if not rec_errors and getattr(e, "batch_index", None) is not None:
            rec_errors = [{"batch_index": e.batch_index, "batch_index_error_message": str(e)}]
        return _partition_result(index, e.code, error_message=str(e) or None,
                                 record_errors=rec_errors), None, -1
    return (_partition_result(index, ErrorCode.NONE, info.first_offset,
                              info.log_append_time_ms, info.log_start_offset), p, info.last_offset)


class DelayedProduce(DelayedOperation):
    """acks=-1: done when every partition's high watermark passed its last offset."""

    def __init__(self, delay_ms: int, waiting: list, response: dict, future: asyncio.Future):
        super().__init__(delay_ms)
        self.waiting = waiting  # [(partition, last_offset, result dict)]
        self.response = response
        self.future = future

    def try_complete(self) -> bool:
        for p, last_offset, _ in self.waiting:
            if p.high_watermark <= last_offset and not p.closed:
                return False
        return self.force_complete()

    def on_expiration(self) -> None:
        pass  # on_complete already marked the partitions that did not make it

    def on_complete(self) -> None:
        for p, last_offset, result in self.waiting:
            if p.high_watermark <= last_offset:
                result["error_code"] = (ErrorCode.NOT_LEADER_OR_FOLLOWER if p.closed
                                        else ErrorCode.REQUEST_TIMED_OUT)
        if not self.future.done():
            self.future.set_result(self.response)

def handle(broker, ctx, req):
    version = ctx.api_version
    acks = req["acks"]
    txn_id = req.get("transactional_id")
    responses = []
    waiting = []
    for topic_data in req["topic_data"]:
        topic = topic_data["name"]
        results = []
        for pd in topic_data["partition_data"]:
            if acks not in (-1, 0, 1):
                results.append(_partition_result(pd["index"], ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            result, p, last_offset = append_one(broker, topic, pd["index"], pd.get("records"),
                                                 version, txn_id)
            results.append(result)
            if p is not None:
                broker.fetch_purgatory.check_and_complete(p.key)
                if acks == -1:
                    waiting.append((p, last_offset, result))
        responses.append({"name": topic, "partition_responses": results})
    response = {"responses": responses, "throttle_time_ms": 0}
    if acks == 0:
        if any(r["error_code"] for t in responses for r in t["partition_responses"]):
            # Kafka closes the connection: the only way to tell an acks=0 producer.
            raise ConnectionAbortedError("acks=0 produce failed")
        return None
    if acks == 1 or not waiting:
        return response
    future = asyncio.get_running_loop().create_future()
    op = DelayedProduce(req["timeout_ms"], waiting, response, future)
    keys = [p.key for p, _, _ in waiting]
    broker.produce_purgatory.try_complete_else_watch(op, keys)
    return future
