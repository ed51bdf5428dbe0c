"""storage/errors.py: every storage exception carries the Kafka code its docstring names
(storage cannot import the protocol's table, so the two are checked against each
other here), and KafkaStorageError's disk-full / failed-dir distinction."""
import errno
import inspect
import re

import pytest

from mpbroker.protocol.errors import ErrorCode
from storage import errors

EXCEPTIONS = [c for _, c in inspect.getmembers(errors, inspect.isclass)
              if issubclass(c, errors.StorageError)]


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda c: c.__name__)
def test_code_is_the_kafka_code_of_the_documented_name(cls):
    name, code = re.match(r"([A-Z_]+) \((-?\d+)\)", cls.__doc__).groups()
    assert cls.code == int(code) == ErrorCode[name]


def test_message_and_str():
    assert str(errors.CorruptRecordError("bad crc")) == "bad crc"
    assert str(errors.CorruptRecordError()) == "CorruptRecordError"
    assert errors.OffsetOutOfRangeError("x").message == "x"


@pytest.mark.parametrize("err, full", [(errno.ENOSPC, True), (errno.EDQUOT, True),
                                       (errno.EIO, False), (errno.EROFS, False), (None, False)])
def test_a_full_disk_is_not_a_failed_log_dir(err, full):
    e = errors.KafkaStorageError("append", err)
    assert e.code == 56 and e.errno == err and e.disk_full is full
    # an append that could not be undone takes the log offline, full disk or not
    assert errors.KafkaStorageError("append", err, log_consistent=False).disk_full is False


def test_from_os_error_keeps_the_errno_and_says_what():
    e = errors.KafkaStorageError.from_os_error("appending to t-0", OSError(errno.ENOSPC, "No space"))
    assert e.errno == errno.ENOSPC and e.disk_full
    assert str(e).startswith("appending to t-0: ") and "No space" in str(e)
