import importlib

import pytest

from workers.groups import errors

NAMES = [n for n in dir(errors) if n.isupper()]


def test_codes_match_kafka_python_table():
    kerrors = pytest.importorskip("kafka.errors")
    by_name = {}
    for obj in vars(kerrors).values():
        if isinstance(obj, type) and hasattr(obj, "errno") and hasattr(obj, "message"):
            by_name[obj.message] = obj.errno
    aliases = {"NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION", "UNKNOWN_SERVER_ERROR": "UNKNOWN"}
    checked = 0
    for name in NAMES:
        code = by_name.get(name, by_name.get(aliases.get(name, "")))
        if code is not None:
            assert getattr(errors, name) == code, name
            checked += 1
    assert checked >= 30


def test_codes_match_protocol_table():
    proto = importlib.import_module("mpbroker.protocol.errors")
    table = getattr(proto, "ErrorCode", proto)
    for name in NAMES:
        if hasattr(table, name):
            assert int(getattr(table, name)) == getattr(errors, name), name


def test_store_error_mapping():
    assert errors.map_group_store_error(errors.NOT_ENOUGH_REPLICAS) == errors.COORDINATOR_NOT_AVAILABLE
    assert errors.map_group_store_error(errors.UNKNOWN_TOPIC_OR_PARTITION) == errors.COORDINATOR_NOT_AVAILABLE
    assert errors.map_group_store_error(errors.NOT_LEADER_OR_FOLLOWER) == errors.NOT_COORDINATOR
    assert errors.map_group_store_error(errors.KAFKA_STORAGE_ERROR) == errors.NOT_COORDINATOR
    assert errors.map_group_store_error(errors.REQUEST_TIMED_OUT) == errors.REBALANCE_IN_PROGRESS
    assert errors.map_group_store_error(errors.MESSAGE_TOO_LARGE) == errors.UNKNOWN_SERVER_ERROR
    assert errors.map_offset_store_error(errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND) == errors.COORDINATOR_NOT_AVAILABLE
    assert errors.map_offset_store_error(errors.NOT_LEADER_OR_FOLLOWER) == errors.NOT_COORDINATOR
    assert errors.map_offset_store_error(errors.RECORD_LIST_TOO_LARGE) == errors.INVALID_COMMIT_OFFSET_SIZE
    assert errors.map_offset_store_error(errors.REQUEST_TIMED_OUT) == errors.COORDINATOR_NOT_AVAILABLE
    assert errors.map_heartbeat_store_error(errors.REQUEST_TIMED_OUT) == errors.COORDINATOR_NOT_AVAILABLE
    assert errors.map_heartbeat_store_error(errors.NOT_LEADER_OR_FOLLOWER) == errors.NOT_COORDINATOR
