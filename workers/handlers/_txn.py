"""Shared plumbing of the transaction API handlers: the worker's transaction coordinator
(`broker.transactions`, workers/txn/service.py), or the error to answer without one, and
the one place where the coordinator's codes become what a request version may carry.

PRODUCER_FENCED (90, KIP-588) exists from InitProducerId v4, AddPartitionsToTxn v2,
AddOffsetsToTxn v2 and EndTxn v2 on; older versions get INVALID_PRODUCER_EPOCH (47), as
Kafka's KafkaApis answers (aiokafka speaks only v0 and knows no error 90; librdkafka
sends AddPartitionsToTxn/AddOffsetsToTxn v0 and EndTxn v1). TxnOffsetCommit and Produce
never carry 90: the KIP-890 verifier (workers/txn/verifier.py `TxnVerifier`) already turns
it into INVALID_PRODUCER_EPOCH, as Kafka's AddPartitionsToTxnManager does."""
from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode

# api key -> first version that may answer PRODUCER_FENCED
PRODUCER_FENCED_SINCE = {api_keys.INIT_PRODUCER_ID: 4, api_keys.ADD_PARTITIONS_TO_TXN: 2,
                         api_keys.ADD_OFFSETS_TO_TXN: 2, api_keys.END_TXN: 2}


def service(broker):
    """(TransactionService, 0) or (None, COORDINATOR_NOT_AVAILABLE)."""
    txn = getattr(broker, "transactions", None)
    if txn is None:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    return txn, ErrorCode.NONE


def for_version(api_key: int, version: int, code: int) -> int:
    """The coordinator's error `code` as request version `version` of `api_key` answers it."""
    if code == ErrorCode.PRODUCER_FENCED and version < PRODUCER_FENCED_SINCE.get(api_key, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
