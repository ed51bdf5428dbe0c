"""Storage exceptions, each carrying the Kafka error code a response should report.

`storage/` is layer 1 and cannot import `mpbroker.protocol.errors`, so every exception
here has an int class attribute `code` equal to Kafka's code (names as in Kafka's
`Errors.java`, given in each docstring). A handler turns any `StorageError` into a
per-partition error value with `exc.code`; anything that is not a `StorageError` is a
bug in the broker, not a bad input.

Exceptions raised while parsing bytes that came from a client or a file are always
one of these (never `struct.error`, `IndexError`, `zlib.error`, ...): a worker never
dies from a client's bytes.
"""
import errno as _errno


class StorageError(Exception):
    """UNKNOWN_SERVER_ERROR (-1): base class; also an internal invariant broken."""

    code = -1

    def __init__(self, message="", *args):
        super().__init__(message, *args)
        self.message = message

    def __str__(self):
        return self.message or type(self).__name__


class CorruptRecordError(StorageError):
    """CORRUPT_MESSAGE (2): bad CRC, impossible length, undecodable bytes."""

    code = 2


class InvalidRecordError(StorageError):
    """INVALID_RECORD (87): well-formed bytes that break a rule (offsets, count, ...).

    `record_errors` is a list of `(batch_index, message)` pairs for ProduceResponse v8+
    `record_errors`; `error_message` feeds its `error_message` field.
    """

    code = 87

    def __init__(self, message="", record_errors=()):
        super().__init__(message)
        self.record_errors = list(record_errors)

    @property
    def error_message(self):
        return self.message or None


class OffsetOutOfRangeError(StorageError):
    """OFFSET_OUT_OF_RANGE (1)."""

    code = 1


class UnknownTopicOrPartitionError(StorageError):
    """UNKNOWN_TOPIC_OR_PARTITION (3)."""

    code = 3


class MessageTooLargeError(StorageError):
    """MESSAGE_TOO_LARGE (10): one batch is larger than `max.message.bytes`."""

    code = 10


class RecordBatchTooLargeError(StorageError):
    """RECORD_LIST_TOO_LARGE (18): the batch is larger than the segment size."""

    code = 18


class InvalidTimestampError(StorageError):
    """INVALID_TIMESTAMP (32): out of `message.timestamp.*.max.ms` bounds.

    `record_errors` as for InvalidRecordError (storage/validator.py fills it)."""

    code = 32

    def __init__(self, message="", record_errors=()):
        super().__init__(message)
        self.record_errors = list(record_errors)


class InvalidRequestError(StorageError):
    """INVALID_REQUEST (42)."""

    code = 42


class UnsupportedForMessageFormatError(StorageError):
    """UNSUPPORTED_FOR_MESSAGE_FORMAT (43): e.g. a transactional batch in v0/v1."""

    code = 43


class OutOfOrderSequenceError(StorageError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45)."""

    code = 45


class DuplicateSequenceError(StorageError):
    """DUPLICATE_SEQUENCE_NUMBER (46)."""

    code = 46


class InvalidProducerEpochError(StorageError):
    """INVALID_PRODUCER_EPOCH (47)."""

    code = 47


class InvalidTxnStateError(StorageError):
    """INVALID_TXN_STATE (48)."""

    code = 48


class InvalidProducerIdMappingError(StorageError):
    """INVALID_PRODUCER_ID_MAPPING (49)."""

    code = 49


class TransactionCoordinatorFencedError(StorageError):
    """TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator epoch."""

    code = 52


class KafkaStorageError(StorageError):
    """KAFKA_STORAGE_ERROR (56): the disk failed (I/O error on a log dir).

    `errno` is the cause's errno (None when unknown).  `disk_full` (ENOSPC, EDQUOT):
    the directory is healthy, only out of space, and serves again once there is room;
    any other errno (EIO, EROFS, ...) means the log directory failed (Kafka's
    LogDirFailureChannel).  `log_consistent` is False when an append could not be
    rolled back (the partition's files no longer match its state: it goes offline).
    """

    code = 56

    def __init__(self, message="", errno=None, log_consistent=True):
        super().__init__(message)
        self.errno = errno
        self.log_consistent = log_consistent

    @property
    def disk_full(self) -> bool:
        return self.errno in DISK_FULL_ERRNOS and self.log_consistent

    @classmethod
    def from_os_error(cls, what: str, e: OSError) -> "KafkaStorageError":
        return cls(f"{what}: {e}", e.errno)


DISK_FULL_ERRNOS = frozenset({_errno.ENOSPC, _errno.EDQUOT})


class LogDirNotFoundError(StorageError):
    """LOG_DIR_NOT_FOUND (57)."""

    code = 57


class UnknownProducerIdError(StorageError):
    """UNKNOWN_PRODUCER_ID (59)."""

    code = 59


class FencedLeaderEpochError(StorageError):
    """FENCED_LEADER_EPOCH (74)."""

    code = 74


class UnknownLeaderEpochError(StorageError):
    """UNKNOWN_LEADER_EPOCH (75)."""

    code = 75


class UnsupportedCompressionTypeError(StorageError):
    """UNSUPPORTED_COMPRESSION_TYPE (76): codec id outside 0..4."""

    code = 76


class OffsetNotAvailableError(StorageError):
    """OFFSET_NOT_AVAILABLE (78)."""

    code = 78


class ProducerFencedError(StorageError):
    """PRODUCER_FENCED (90)."""

    code = 90


class InvalidOffsetError(StorageError):
    """UNKNOWN_SERVER_ERROR (-1): an append would break offset monotonicity.

    Kafka's internal `InvalidOffsetException`: a broker bug or a corrupt follower
    fetch, never a client's fault, hence no specific wire code.
    """

    code = -1


class LogSegmentOffsetOverflowError(StorageError):
    """UNKNOWN_SERVER_ERROR (-1): an offset does not fit a segment's int32 relative range."""

    code = -1
