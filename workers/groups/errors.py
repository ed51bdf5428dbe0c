"""Kafka error codes the group coordinator returns (names and values as in Kafka's Errors.java).

`mpbroker/protocol/errors.py` owns the full table; `workers/groups/` keeps the subset it uses
here so the state machines stay importable while the protocol layer is being written.
`tests/workers/groups/test_errors.py` checks these values against that table once it exists.
"""

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_FETCH_SIZE = 4
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
GROUP_AUTHORIZATION_FAILED = 30
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
UNKNOWN_TOPIC_ID = 100
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128


def map_group_store_error(code: int) -> int:
    """The error a JoinGroup/SyncGroup caller sees when writing group metadata failed.

    Kafka's GroupMetadataManager.storeGroup mapping: the client retries against a
    coordinator it may have to find again.
    """
    if code in (UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return COORDINATOR_NOT_AVAILABLE
    if code in (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR):
        return NOT_COORDINATOR
    if code == REQUEST_TIMED_OUT:
        return REBALANCE_IN_PROGRESS
    if code in (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE):
        return UNKNOWN_SERVER_ERROR
    return code


def map_offset_store_error(code: int) -> int:
    """The per-partition error an OffsetCommit caller sees when the append failed
    (Kafka's GroupMetadataManager.storeOffsets mapping; a commit that timed out waiting
    for the followers answers COORDINATOR_NOT_AVAILABLE, as the group coordinator of
    Kafka 3.x+ does, so that clients look the coordinator up again and retry)."""
    if code in (UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                REQUEST_TIMED_OUT):
        return COORDINATOR_NOT_AVAILABLE
    if code in (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR):
        return NOT_COORDINATOR
    if code in (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE):
        return INVALID_COMMIT_OFFSET_SIZE
    return code


def map_heartbeat_store_error(code: int) -> int:
    """The error a ConsumerGroupHeartbeat caller sees when persisting the change failed
    (Kafka's GroupCoordinatorService: retriable coordinator errors, never
    REBALANCE_IN_PROGRESS, which KIP-848 members do not expect)."""
    if code == REQUEST_TIMED_OUT:
        return COORDINATOR_NOT_AVAILABLE
    return map_group_store_error(code)
