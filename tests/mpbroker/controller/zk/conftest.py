"""The ZooKeeper controller's parts without ZooKeeper: a cache filled by hand (the
parts read it; nothing here reaches the session)."""
import pytest

from mpbroker.controller import zkdata
from mpbroker.controller.zk.cache import ZnodeCache

TOPIC_ID = bytes(range(16))


def fill(cache: ZnodeCache, brokers=(1, 2, 3), topics=None, states=None) -> ZnodeCache:
    cache.brokers = {b: zkdata.BrokerInfo(b, "127.0.0.1", 9000 + b, None, 100 + b) for b in brokers}
    for name, parts in (topics or {}).items():
        cache.topics[name] = zkdata.TopicAssignment(TOPIC_ID, parts, {}, {})
    for (t, p), (leader, isr) in (states or {}).items():
        cache.states[(t, p)] = zkdata.LeaderAndIsr(leader, 3, isr, 7, zk_version=5)
    return cache


@pytest.fixture
def broker_cfg():
    return {"delete.topic.enable": True, "unclean.leader.election.enable": False}


@pytest.fixture
def cache(broker_cfg):
    return ZnodeCache(session=None, broker_id=1, cluster_id="c", broker_cfg=lambda: broker_cfg)
