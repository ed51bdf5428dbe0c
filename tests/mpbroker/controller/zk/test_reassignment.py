"""Reassignment state in the topic znode (mpbroker/controller/zk/reassignment.py)."""
import asyncio
import types

from mpbroker.controller import zkdata
from mpbroker.controller.zk.reassignment import Reassignments, reassignment_of
from mpbroker.protocol.errors import ErrorCode
from tests.mpbroker.controller.zk.conftest import TOPIC_ID, fill


def test_reassignment_of():
    ta = zkdata.TopicAssignment(None, {0: (4, 5, 1, 2), 1: (1, 2)}, {0: (4, 5)}, {0: (1, 2)})
    assert reassignment_of(ta, 0) == ((4, 5, 1, 2), (4, 5), (1, 2))   # RS, target, original
    assert reassignment_of(ta, 1) == ((1, 2), None, (1, 2))           # nothing ongoing


def test_list_answers_after_the_change_in_flight(cache):
    """A completion whose ZooKeeper write is done but whose answer has not reached the
    loop yet (the controller's lock held): ListPartitionReassignments waits for it and
    does not list the finished move (Kafka answers after the event in progress)."""
    fill(cache, topics={"t": {0: (2, 3, 1)}}, states={("t", 0): (1, (1, 2, 3))})
    cache.topics["t"] = zkdata.TopicAssignment(TOPIC_ID, {0: (2, 3, 1)}, {}, {0: (1,)})
    ctl = types.SimpleNamespace(active=True, lock=asyncio.Lock())
    r = Reassignments(cache, ctl)

    async def scenario():
        assert (await r.list_partition_reassignments(None))[2] == [("t", 0, [2, 3, 1], [], [1])]
        async with ctl.lock:                  # the tick's commit is in flight
            listing = asyncio.ensure_future(r.list_partition_reassignments(None))
            for _ in range(5):
                await asyncio.sleep(0)        # let the request run as far as it can
            assert not listing.done()
            cache.topics["t"] = zkdata.TopicAssignment(TOPIC_ID, {0: (2, 3)}, {}, {})
        return await listing

    assert asyncio.run(scenario()) == (0, None, [])


def test_list_on_a_broker_that_is_not_the_controller(cache):
    r = Reassignments(fill(cache), types.SimpleNamespace(active=False, lock=asyncio.Lock()))
    assert asyncio.run(r.list_partition_reassignments(None))[0] == ErrorCode.NOT_CONTROLLER
