"""Produce (key 0), v0-v11.

Per partition: validate and append the batch to the owner's log (offsets assigned in
place, CRC checked, idempotent producer state checked), then answer according to acks:
0 no response at all, 1 once the leader appended, -1 once the high watermark covers the
batch (at once when it already does, as with one replica; else a DelayedProduce,
workers/delayed.py, in the produce purgatory, expired after `timeout_ms` with
REQUEST_TIMED_OUT). Errors are per partition; the request never fails as a whole except
for bad acks (INVALID_REQUIRED_ACKS on every partition).

Record formats (storage/convert.py): v0-v2 may carry magic 0/1 message sets, converted
to one v2 batch; v3-v6 may not use zstd; a topic compression.type other than
`producer` recompresses. Every record is validated first as Kafka's LogValidator does
(storage/validator.py; `produce.record.validation.enable=false` skips the record walk
of magic-2 batches): CORRUPT_MESSAGE / INVALID_RECORD / INVALID_TIMESTAMP for the
partition, with `record_errors` (v8+) for keyless records on a compacted topic and
out-of-bounds timestamps, and nothing appended.

Transactional batches (attribute bit 4): a request carrying one without a
`transactional_id` gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition
(Kafka's check).  With `transaction.partition.verification.enable` (default true) and
`broker.txn_verifier` set (the transaction coordinator's KIP-890 check,
workers/txn/service.py), each transactional partition is verified first:
`txn_verifier(transactional_id, producer_id, producer_epoch, topic, partition)` returns
an error code or an awaitable of one; a non-zero code refuses that partition, and the
appends wait for all answers.  The first transactional batch of a producer opens its
transaction on the partition (storage/producer_state.py).
"""
from __future__ import annotations

import asyncio
import struct

from mpbroker.protocol.errors import ErrorCode
from mpbroker.metadata.model import INTERNAL_TOPICS
from storage import convert
from storage import errors as serr
from storage.batch import (ATTRIBUTES_OFFSET, HEADER_SIZE, MAGIC, PRODUCER_ID_OFFSET,
                           TRANSACTIONAL_MASK, batch_magic)

from workers.answers import later, settle
from workers.delayed import DelayedProduce

_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qh")        # producer id, producer epoch (adjacent)


def _partition_result(index, error_code, base_offset=-1, log_append_time_ms=-1,
                      log_start_offset=-1, error_message=None, record_errors=()):
    # a plain int: an answer for another worker crosses the mesh pickled, where an
    # IntEnum member costs a reduce call each way (2.6 of a produce answer's 5.1 µs)
    return {"index": index, "error_code": int(error_code), "base_offset": base_offset,
            "log_append_time_ms": log_append_time_ms, "log_start_offset": log_start_offset,
            "record_errors": list(record_errors), "error_message": error_message}


def append_one(broker, topic: str, index: int, records, version: int, transactional_id,
               acks: int = 1):
    """Append to one partition we own; returns (result dict, partition or None, last offset).
    acks=-1 needs an ISR of at least min.insync.replicas (else NOT_ENOUGH_REPLICAS)."""
    p = broker.partition(topic, index)
    if p is None:
        return _partition_result(index, broker.partition_error(topic, index)), None, -1
    if topic in INTERNAL_TOPICS:
        return _partition_result(index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 error_message="Cannot append to internal topic"), None, -1
    if records is None or len(records) == 0:
        return _partition_result(index, ErrorCode.INVALID_RECORD,
                                 error_message="Produce request carries no records"), None, -1
    if acks == -1 and p.not_enough_replicas():
        return _partition_result(index, ErrorCode.NOT_ENOUGH_REPLICAS, error_message=(
            f"The size of the current ISR {list(p.isr)} is insufficient to satisfy the "
            f"min.isr requirement of {p.min_isr}")), None, -1
    try:
        # every record validated (storage/validator.py), v0-v2 magic 0/1 sets converted,
        # batches recompressed to the topic's compression.type (storage/convert.py)
        validate = broker.config["produce.record.validation.enable"]
        payload = convert.prepare_produce(records, version, p.log.config, broker.clock(),
                                          validate)
        # the validator checked these very batches as the log would (CRC, framing, the
        # client rules): not twice; converted or recompressed bytes are checked again
        info = p.append(payload, validated=validate and payload is records)
    except serr.StorageError as e:
        rec_errors = [{"batch_index": i, "batch_index_error_message": m}
                      for i, m in getattr(e, "record_errors", None) or ()]
        if not rec_errors and getattr(e, "batch_index", None) is not None:
            rec_errors = [{"batch_index": e.batch_index, "batch_index_error_message": str(e)}]
        return _partition_result(index, e.code, error_message=str(e) or None,
                                 record_errors=rec_errors), None, -1
    return (_partition_result(index, ErrorCode.NONE, info.first_offset,
                              info.log_append_time_ms, info.log_start_offset), p, info.last_offset)


def transactional_batch(records) -> tuple[int, int] | None:
    """(producer id, producer epoch) when `records` start with a transactional v2 batch."""
    try:
        if records is None or len(records) < HEADER_SIZE or batch_magic(records) != MAGIC:
            return None
        # the header fields read in place (every partition of every Produce asks)
        if not _ATTRIBUTES.unpack_from(records, ATTRIBUTES_OFFSET)[0] & TRANSACTIONAL_MASK:
            return None
        return _PRODUCER.unpack_from(records, PRODUCER_ID_OFFSET)
    except Exception:
        return None         # unreadable framing: the append answers it


def _txn_checks(broker, req) -> dict:
    """{(topic, index): error code or awaitable} for transactional partitions."""
    txn_id = req.get("transactional_id")
    verifier = getattr(broker, "txn_verifier", None)
    if verifier is not None and not broker.config["transaction.partition.verification.enable"]:
        verifier = None
    checks = {}
    for topic_data in req["topic_data"]:
        topic = topic_data["name"]
        for pd in topic_data["partition_data"]:
            tb = transactional_batch(pd.get("records"))
            if tb is None:
                continue
            if txn_id is None:
                # Kafka refuses the whole request (KafkaApis.handleProduceRequest)
                return {(t["name"], q["index"]): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                        for t in req["topic_data"] for q in t["partition_data"]}
            if verifier is not None and broker.partition(topic, pd["index"]) is not None:
                checks[(topic, pd["index"])] = verifier(txn_id, tb[0], tb[1], topic, pd["index"])
    return checks


def handle(broker, ctx, req):
    checks = _txn_checks(broker, req)
    if not any(later(c) for c in checks.values()):
        return _produce(broker, ctx, req, checks)

    async def verified():
        codes = {}
        for key, c in checks.items():
            try:
                codes[key] = await settle(c)
            except Exception:
                codes[key] = ErrorCode.UNKNOWN_SERVER_ERROR
        return await settle(_produce(broker, ctx, req, codes))
    return verified()


def _produce(broker, ctx, req, codes: dict):
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
            refused = codes.get((topic, pd["index"]))
            if refused:
                results.append(_partition_result(pd["index"], refused))
                continue
            result, p, last_offset = append_one(broker, topic, pd["index"], pd.get("records"),
                                                 version, txn_id, acks)
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
    if DelayedProduce.satisfied(waiting):
        # one replica, or followers already caught up: answered now, as the operation
        # would have completed on its first try, without a future to await
        DelayedProduce.settle(waiting)
        return response
    future = asyncio.get_running_loop().create_future()
    op = DelayedProduce(req["timeout_ms"], waiting, response, future)
    keys = [p.key for p, _, _ in waiting]
    broker.produce_purgatory.try_complete_else_watch(op, keys)
    return future
