"""mpbroker/protocol/errors.py: Kafka's error table (codes, names, retriable flags,
default messages) and the protocol exceptions."""
from mpbroker.protocol import errors
from mpbroker.protocol.errors import (RETRIABLE, EncodeError, ErrorCode, FrameTooLarge,
                                      ProtocolError, UnsupportedVersion)


def test_codes_names_and_flags_are_kafkas():
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6 and ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.retriable and ErrorCode.REQUEST_TIMED_OUT.retriable
    assert not ErrorCode.TOPIC_AUTHORIZATION_FAILED.retriable and not ErrorCode.NONE.retriable
    assert RETRIABLE == {c.value for c in ErrorCode if c.retriable}
    assert len({c.value for c in ErrorCode}) == len(list(ErrorCode))      # no code twice


def test_messages_and_names_of_any_code():
    assert ErrorCode.REQUEST_TIMED_OUT.message == "The request timed out."
    assert errors.message(7) == "The request timed out." and errors.message(0) == ""
    assert errors.message(9999) == errors.message(-1)           # unknown: the server error's
    assert errors.name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert errors.name(9999) == "UNKNOWN_ERROR_CODE_9999"


def test_exceptions():
    e = UnsupportedVersion(1, 99)
    assert isinstance(e, ProtocolError) and (e.api_key, e.version) == (1, 99)
    assert str(e) == "unsupported api_key=1 version=99"
    assert str(UnsupportedVersion(1, 99, "no such version")) == "no such version"
    big = FrameTooLarge(-5, 100)
    assert isinstance(big, ProtocolError) and (big.size, big.max_bytes) == (-5, 100)
    assert str(big) == "frame size -5 outside 0..100"
    assert issubclass(EncodeError, ValueError) and not issubclass(EncodeError, ProtocolError)
