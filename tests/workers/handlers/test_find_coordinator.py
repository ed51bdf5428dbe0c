"""workers/handlers/find_coordinator.py: which broker a group or transactional id's
coordinator is (the leader of its internal topic's partition), the errors per key, the
v4+ batch of keys, and the internal topic created on first use."""
from __future__ import annotations

import asyncio
import types

from mpbroker.metadata import model
from mpbroker.metadata.model import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from mpbroker.protocol.errors import ErrorCode
from workers.handlers import find_coordinator as fc

NS = types.SimpleNamespace


class FakeController:
    def __init__(self, broker):
        self.broker, self.ensured = broker, []

    async def ensure_internal_topic(self, name):
        self.ensured.append(name)
        self.broker.metadata.topics[name] = _topic(leaders=[2, 1])


def _topic(leaders):
    return NS(partitions={i: NS(leader=b) for i, b in enumerate(leaders)})


def make_broker(topics=None, groups=True, transactions=True):
    b = NS(metadata=NS(topics=dict(topics or {}),
                       brokers={1: model.Broker(1, "h1", 9091), 2: model.Broker(2, "h2", 9092)}),
           groups=NS(partition_for=lambda key: len(key) % 2) if groups else None,
           transactions=NS(partition_for=lambda key: 0) if transactions else None)
    b.controller = FakeController(b)
    return b


def test_the_coordinator_is_the_leader_of_the_keys_partition():
    b = make_broker({OFFSETS_TOPIC: _topic([1, 2]), TRANSACTION_STATE_TOPIC: _topic([2])})
    assert fc.locate(b, "g", 0)["node_id"] == 2                # partition 1 (len("g") % 2)
    assert fc.locate(b, "gg", 0) == {"key": "gg", "node_id": 1, "host": "h1", "port": 9091,
                                     "error_code": 0, "error_message": None}
    assert fc.locate(b, "tx", 1)["host"] == "h2"


def test_errors_per_key():
    b = make_broker({OFFSETS_TOPIC: _topic([3, 3])})          # broker 3 is not registered
    assert fc.locate(b, "g", 0)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert fc.locate(b, "g", 7)["error_code"] == ErrorCode.INVALID_REQUEST
    b = make_broker({TRANSACTION_STATE_TOPIC: _topic([1])})
    assert fc.locate(b, "", 1)["error_code"] == ErrorCode.INVALID_REQUEST
    assert fc.locate(b, "g", 0)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE  # no topic
    off = make_broker({OFFSETS_TOPIC: _topic([1, 1])}, groups=False, transactions=False)
    assert fc.locate(off, "g", 0)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert fc.locate(off, "t", 1)["error_message"] == "The transaction coordinator is not running"


def test_v4_answers_every_key_and_v3_one():
    b = make_broker({OFFSETS_TOPIC: _topic([1, 2])})
    v4 = fc.handle(b, NS(api_version=4), {"key_type": 0, "coordinator_keys": ["g", "gg"]})
    assert [(c["key"], c["node_id"]) for c in v4["coordinators"]] == [("g", 2), ("gg", 1)]
    v3 = fc.handle(b, NS(api_version=3), {"key_type": 0, "key": "gg"})
    assert (v3["node_id"], v3["host"], v3["port"], v3["error_code"]) == (1, "h1", 9091, 0)


def test_a_missing_internal_topic_is_created_first():
    b = make_broker()
    answer = fc.handle(b, NS(api_version=3), {"key_type": 1, "key": "tx"})
    assert asyncio.iscoroutine(answer)
    assert asyncio.run(answer)["node_id"] == 2
    assert b.controller.ensured == [TRANSACTION_STATE_TOPIC]
    # without a coordinator running nothing is created: the answer says it is not available
    off = make_broker(groups=False, transactions=False)
    assert fc.handle(off, NS(api_version=3), {"key_type": 0, "key": "g"})["error_code"] == \
        ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert off.controller.ensured == []


def test_a_partition_not_initialized_yet_has_no_coordinator():
    # cluster mode: __consumer_offsets is shown while the controller initializes its
    # partitions; the key's partition (1 here) is not shown yet
    b = make_broker({OFFSETS_TOPIC: NS(partitions={0: NS(leader=1)})})
    assert fc.locate(b, "g", 0)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert fc.locate(b, "gg", 0)["node_id"] == 1
