"""KIP-890 part 1 on the produce path: `broker.txn_verifier`.

The partition owner calls it for a transactional batch whose producer has no open
transaction on that partition yet; it asks the transaction coordinator of the
transactional id (in process, over the worker mesh, or over a broker connection) with
AddPartitionsToTxn v4 verifyOnly, and maps the answer to a Produce error code.
"""
from __future__ import annotations

import logging

from mpbroker.metadata.model import TRANSACTION_STATE_TOPIC as TXN_TOPIC
from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from workers.txn.markers import SelfRequestContext

log = logging.getLogger(__name__)


class TxnVerifier:
    """`broker.txn_verifier`: may a transactional batch of (transactional_id, producer_id,
    producer_epoch) go into (topic, partition)? Asks the coordinator whether the partition
    was added to the producer's ongoing transaction (AddPartitionsToTxn v4 verifyOnly),
    unless the partition already has an open transaction of that producer and epoch
    (then it was verified when that transaction's first batch came). Returns a Produce
    error code, or an awaitable of one: the coordinator's retriable answers become
    NOT_ENOUGH_REPLICAS (retriable for every client, as Kafka 3.6+ does), an unknown
    producer id mapping INVALID_TXN_STATE, a fenced epoch INVALID_PRODUCER_EPOCH (what
    the partition's own producer-state check answers for an old epoch)."""

    def __init__(self, broker):
        self.broker = broker

    def __call__(self, transactional_id, producer_id: int, producer_epoch: int,
                 topic: str, partition: int):
        broker = self.broker
        p = broker.partition(topic, partition)
        if p is not None:
            entry = p.log.producer_state.last_entry(producer_id)
            if (entry is not None and entry.producer_epoch == producer_epoch
                    and entry.current_txn_first_offset is not None):
                return ErrorCode.NONE
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        return self._ask(transactional_id, producer_id, producer_epoch, topic, partition)

    async def _ask(self, tid, pid, epoch, topic, partition) -> int:
        broker = self.broker
        txn = broker.transactions
        tp = (topic, partition)
        if TXN_TOPIC not in broker.metadata.topics:
            return ErrorCode.INVALID_TXN_STATE
        idx = txn.partition_for(tid)
        state = broker.metadata.topics[TXN_TOPIC].partitions.get(idx)
        if state is None:       # not initialized yet (the topic is being created): retriable
            return ErrorCode.NOT_ENOUGH_REPLICAS
        leader = state.leader
        body = {"transactions": [{"transactional_id": tid, "producer_id": pid,
                                  "producer_epoch": epoch, "verify_only": True,
                                  "topics": [{"name": topic, "partitions": [partition]}]}]}
        code = None
        try:
            if leader == broker.broker_id:
                router = broker.router
                w = (router.owner(TXN_TOPIC, idx) if router is not None and router.active
                     else broker.worker_id)
                if w == broker.worker_id:
                    code = txn.verify_partitions(tid, pid, epoch, [tp])[tp]
                else:
                    fut = router.forward(w, SelfRequestContext(api_keys.ADD_PARTITIONS_TO_TXN, 4), body)
                    if fut is None:
                        code = ErrorCode.NOT_COORDINATOR
                    else:
                        code = _verify_code(await fut, tp)
            else:
                code = _verify_code(await txn.markers.remote_request(
                    leader, api_keys.ADD_PARTITIONS_TO_TXN, 4, body), tp)
        except Exception as e:
            log.info("verifying %s with the transaction coordinator failed: %s", tp, e)
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS):
            return ErrorCode.NOT_ENOUGH_REPLICAS
        if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            return ErrorCode.INVALID_TXN_STATE
        if code == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return code


def _verify_code(resp: dict, tp) -> int:
    if resp.get("error_code"):
        return resp["error_code"]
    for r in resp.get("results_by_transaction") or ():
        for t in r.get("topic_results") or ():
            for p in t.get("results_by_partition") or ():
                if (t["name"], p["partition_index"]) == tuple(tp):
                    return p["partition_error_code"]
    return ErrorCode.UNKNOWN_SERVER_ERROR
