"""What a failing handler answers: the API's error response, and one log line.

A handler that raises (or whose awaitable raises) is answered like Kafka's
`KafkaApis.handleError` -> `AbstractRequest.getErrorResponse`: the response of that API
with the failure's error code in every error field, the request's topics/partitions/
groups echoed (`mpbroker.protocol.error_response`), so the client sees an answer for
what it asked and the connection goes on serving the requests pipelined behind it.

The code (`failure_code`): an exception carrying a Kafka error code (`code`: storage
errors, `MetadataError`, `ControllerCallError`) answers that code; a timeout
REQUEST_TIMED_OUT; any other `OSError` is a disk failure, KAFKA_STORAGE_ERROR;
anything else UNKNOWN_SERVER_ERROR. Then per API, as Kafka's coordinators do: a
FindCoordinator that failed (its internal topic could not be created) answers
COORDINATOR_NOT_AVAILABLE, and a group or transaction coordinator API whose log write
failed NOT_COORDINATOR (both make clients look the coordinator up again).

One WARNING per failure, with the API, the client and the cause (a traceback when the
exception is not one of the expected kinds: it is a bug of ours). A failure that
another process has already logged (`logged_elsewhere`: the controller, for its RPC)
is logged here at INFO only.

`ConnectionAbortedError` is not an error to answer: a handler raises it to have the
connection closed (acks=0 Produce, Kafka's only way to tell such a producer).
"""
from __future__ import annotations

import asyncio
import logging

from mpbroker.protocol import api_keys
from mpbroker.protocol import errors
from mpbroker.protocol.error_response import error_response
from mpbroker.protocol.errors import ErrorCode
from workers.answers import later

log = logging.getLogger("workers.handlers")

_KNOWN_CODES = frozenset(int(c) for c in ErrorCode) - {0}

# APIs answered by a group or transaction coordinator (their writes go to
# __consumer_offsets / __transaction_state).
COORDINATOR_APIS = frozenset({
    api_keys.JOIN_GROUP, api_keys.SYNC_GROUP, api_keys.HEARTBEAT, api_keys.LEAVE_GROUP,
    api_keys.OFFSET_COMMIT, api_keys.OFFSET_FETCH, api_keys.DESCRIBE_GROUPS,
    api_keys.DELETE_GROUPS, api_keys.OFFSET_DELETE, api_keys.CONSUMER_GROUP_HEARTBEAT,
    api_keys.CONSUMER_GROUP_DESCRIBE, api_keys.TXN_OFFSET_COMMIT, api_keys.INIT_PRODUCER_ID,
    api_keys.ADD_PARTITIONS_TO_TXN, api_keys.ADD_OFFSETS_TO_TXN, api_keys.END_TXN})

LOGGED_ELSEWHERE = "mpbroker_logged_elsewhere"


def failure_code(exc: BaseException, api_key: int) -> int:
    code = getattr(exc, "code", None)
    if not (isinstance(code, int) and not isinstance(code, bool) and code in _KNOWN_CODES):
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            code = ErrorCode.REQUEST_TIMED_OUT
        elif isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
            code = ErrorCode.KAFKA_STORAGE_ERROR
        else:
            code = ErrorCode.UNKNOWN_SERVER_ERROR
    if api_key == api_keys.FIND_COORDINATOR and code in (
            ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.REQUEST_TIMED_OUT):
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif api_key in COORDINATOR_APIS and code == ErrorCode.KAFKA_STORAGE_ERROR:
        code = ErrorCode.NOT_COORDINATOR
    return int(code)


def _expected(exc: BaseException) -> bool:
    """Failures of the environment (disk, timeouts, the controller's answers), not bugs."""
    return isinstance(exc, OSError) or isinstance(getattr(exc, "code", None), int)


def failure_message(exc: BaseException, code: int) -> str | None:
    """Kafka leaves UNKNOWN_SERVER_ERROR's message null (no internals leak to clients)."""
    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
        return None
    text = getattr(exc, "message", None) or str(exc)
    return text or errors.message(code)


def answer_failure(ctx, request: dict | None, exc: BaseException) -> dict:
    """Log `exc` once and return the error response for `request` (the part this
    process ran: a forwarded part answers only its own partitions)."""
    api_key, version = ctx.api_key, ctx.api_version
    code = failure_code(exc, api_key)
    where = getattr(ctx, "forwarded_from", None)
    origin = f" (forwarded by worker {where})" if where is not None else ""
    level = logging.INFO if getattr(exc, LOGGED_ELSEWHERE, False) else logging.WARNING
    log.log(level, "%s v%d from client %r at %s%s failed: %s: %s; answered %s",
            api_keys.NAMES.get(api_key, api_key), version, ctx.client_id, ctx.client_host, origin,
            type(exc).__name__, exc, errors.name(code),
            exc_info=None if _expected(exc) or level == logging.INFO else exc)
    return error_response(api_key, version, request, code, failure_message(exc, code))


def run_guarded(handle, broker, ctx, request: dict, guard_awaitable: bool = True):
    """`handle(broker, ctx, request)` whose failures become the error response: a
    body dict, an awaitable of one, or None (no response owed). Only
    ConnectionAbortedError passes through (the connection is to be closed); so does
    any failure of an acks=0 Produce, which owes no response (as a ConnectionAbortedError).
    `guard_awaitable` False: an awaitable answer is returned unguarded, for a caller
    that awaits it under the same rule itself (the dispatcher's `_finish`)."""
    try:
        result = handle(broker, ctx, request)
    except ConnectionAbortedError:
        raise
    except Exception as e:
        if ctx.api_key == api_keys.PRODUCE and request.get("acks") == 0:
            log.warning("acks=0 Produce from client %r at %s failed: %s: %s; closing the "
                        "connection", ctx.client_id, ctx.client_host, type(e).__name__, e,
                        exc_info=None if _expected(e) else e)
            raise ConnectionAbortedError(f"acks=0 produce failed: {e}") from e
        return answer_failure(ctx, request, e)
    if guard_awaitable and later(result):
        return _guard_awaitable(result, ctx, request)
    return result


async def _guard_awaitable(awaitable, ctx, request):
    try:
        return await awaitable
    except (ConnectionAbortedError, asyncio.CancelledError):
        raise
    except Exception as e:
        return answer_failure(ctx, request, e)

