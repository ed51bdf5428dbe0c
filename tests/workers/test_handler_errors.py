"""Tests for workers.handler_errors: the error code and message a failure is answered
with (the dispatcher's answers for every API: test_dispatch.py)."""
import asyncio
import errno

import pytest

from mpbroker.metadata.model import MetadataError
from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode as E
from storage.errors import CorruptRecordError
from workers import handler_errors as HE


@pytest.mark.parametrize("exc,api_key,code", [
    (OSError(errno.EIO, "I/O error"), K.CREATE_TOPICS, E.KAFKA_STORAGE_ERROR),
    (OSError(errno.ENOSPC, "full"), K.DELETE_TOPICS, E.KAFKA_STORAGE_ERROR),
    (OSError(errno.ENOSPC, "full"), K.FIND_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE),
    (OSError(errno.ENOSPC, "full"), K.OFFSET_COMMIT, E.NOT_COORDINATOR),
    (OSError(errno.ENOSPC, "full"), K.END_TXN, E.NOT_COORDINATOR),
    (TimeoutError("controller call timed out"), K.CREATE_TOPICS, E.REQUEST_TIMED_OUT),
    (asyncio.TimeoutError(), K.METADATA, E.REQUEST_TIMED_OUT),
    (ConnectionError("lost the controller"), K.CREATE_TOPICS, E.UNKNOWN_SERVER_ERROR),
    (MetadataError(E.POLICY_VIOLATION, "too many"), K.CREATE_TOPICS, E.POLICY_VIOLATION),
    (CorruptRecordError("bad crc"), K.PRODUCE, E.CORRUPT_MESSAGE),
    (KeyError("x"), K.PRODUCE, E.UNKNOWN_SERVER_ERROR),
    (type("Odd", (Exception,), {"code": 9999})(), K.METADATA, E.UNKNOWN_SERVER_ERROR),
    (type("Flag", (Exception,), {"code": True})(), K.METADATA, E.UNKNOWN_SERVER_ERROR),
])
def test_failure_codes(exc, api_key, code):
    assert HE.failure_code(exc, api_key) == code


def test_unknown_server_error_leaks_no_message_and_storage_error_says_why():
    assert HE.failure_message(KeyError("secret internals"), E.UNKNOWN_SERVER_ERROR) is None
    assert "No space" in HE.failure_message(OSError(28, "No space left on device"),
                                            E.KAFKA_STORAGE_ERROR)
