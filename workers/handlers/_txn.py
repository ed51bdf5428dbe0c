"""Shared plumbing of the transaction API handlers: the worker's transaction coordinator
(`broker.transactions`, workers/txn/service.py), or the error to answer without one."""
from mpbroker.protocol.errors import ErrorCode


def service(broker):
    """(TransactionService, 0) or (None, COORDINATOR_NOT_AVAILABLE)."""
    txn = getattr(broker, "transactions", None)
    if txn is None:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    return txn, ErrorCode.NONE
