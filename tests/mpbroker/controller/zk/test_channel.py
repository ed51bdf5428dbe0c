"""Controller -> broker request bodies and queueing (mpbroker/controller/zk/channel.py)."""
from types import SimpleNamespace

from mpbroker.controller.zk.channel import BrokerChannel
from tests.mpbroker.controller.zk.conftest import TOPIC_ID, fill


def make(cache, active=False):
    return BrokerChannel(cache, SimpleNamespace(active=active, epoch=7), broker_id=1)


def test_stop_replica_epochs(cache):
    fill(cache, topics={"t": {0: (1, 2), 1: (1, 2)}}, states={("t", 0): (1, (1, 2))})
    states = make(cache)._stop_states({("t", 0): False, ("t", 1): True})
    assert states == [{"topic_name": "t", "partition_states": [
        {"partition_index": 0, "leader_epoch": 3, "delete_partition": False},
        {"partition_index": 1, "leader_epoch": -2, "delete_partition": True}]}]


def test_leader_and_isr_and_update_metadata_states(cache):
    fill(cache, brokers=(1, 2), topics={"t": {0: (1, 2, 3)}}, states={("t", 0): (1, (1, 2))})
    ch = make(cache)
    lai = ch._topic_states({("t", 0), ("gone", 0)}, True)
    assert lai == [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": [
        {"partition_index": 0, "controller_epoch": 7, "leader": 1, "leader_epoch": 3, "isr": [1, 2],
         "replicas": [1, 2, 3], "partition_epoch": 5, "adding_replicas": [], "removing_replicas": []}]}]
    um = ch._topic_states({("t", 0)}, False)[0]["partition_states"][0]
    assert (um["zk_version"], um["offline_replicas"]) == (5, [3])
    assert [x["broker_id"] for x in ch._live_leaders({("t", 0)})] == [1]


def test_nothing_is_queued_unless_active(cache):
    fill(cache, topics={"t": {0: (1, 2)}}, states={("t", 0): (1, (1, 2))})
    ch = make(cache, active=False)
    ch.changed(("t", 0))
    assert ch._outbox == {}


def test_a_leader_and_isr_also_loads_the_new_siblings_of_its_partitions(cache):
    # a new topic's states are created together; the LeaderAndIsr to broker 1 names only
    # partition 0, and the view must not show the topic with one partition of three
    import asyncio

    from mpbroker.controller import zkdata
    from mpbroker.controller.zk.channel import LEADER_AND_ISR

    fill(cache, brokers=(1, 2), topics={"t": {0: (1,), 1: (2,), 2: (2,)}, "u": {0: (2,)}})
    loaded = []

    async def load_state(t, p):
        loaded.append((t, p))
        cache.states[(t, p)] = zkdata.LeaderAndIsr(1 if p == 0 else 2, 0, (1,), 7)

    async def nothing():
        pass

    cache.load_state, cache.load_controller = load_state, nothing
    published = []
    body = {"controller_id": 2, "controller_epoch": 7, "broker_epoch": -1, "type": 0,
            "topic_states": [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": [
                {"partition_index": 0, "controller_epoch": 7, "leader": 1, "leader_epoch": 0, "isr": [1],
                 "replicas": [1], "partition_epoch": 0, "adding_replicas": [], "removing_replicas": []}]}],
            "live_leaders": []}
    asyncio.run(make(cache).receive(LEADER_AND_ISR, 5, body, 0, False,
                                    lambda: published.append(sorted(cache.build(1).topics["t"].partitions))))
    assert sorted(loaded) == [("t", 0), ("t", 1), ("t", 2)]      # not "u": not named
    assert published == [[0, 1, 2]]
