"""The view the znode cache builds (mpbroker/controller/zk/cache.py)."""
from tests.mpbroker.controller.zk.conftest import fill


def test_view_has_live_brokers_and_initialized_partitions_only(cache):
    fill(cache, brokers=(1, 2), topics={"t": {0: (1, 2), 1: (2, 3)}},
         states={("t", 0): (1, (1, 2))})
    md = cache.build(epoch=4)
    assert (md.epoch, sorted(md.brokers)) == (4, [1, 2])
    st = md.topics["t"].partitions
    assert list(st) == [0]                        # partition 1 has no state znode yet
    assert (st[0].leader, st[0].isr, st[0].partition_epoch) == (1, (1, 2), 5)


def test_offline_replicas(cache):
    fill(cache, brokers=(1, 2), topics={"t": {0: (2, 3, 1)}}, states={("t", 0): (2, (2,))})
    cache.offline[("t", 0)] = {2}                 # broker 2 reported a failed log dir
    assert cache.build(0).topics["t"].partitions[0].offline_replicas == (2, 3)
    cache.stopped.add(("t", 0))                   # this broker (1) got StopReplica
    assert cache.build(0).topics["t"].partitions[0].offline_replicas == (2, 3, 1)


def test_topics_marked_for_deletion_leave_the_view_unless_deletion_is_disabled(cache, broker_cfg):
    fill(cache, topics={"t": {0: (1,)}}, states={("t", 0): (1, (1,))})
    cache.deleting = {"t"}
    assert "t" not in cache.build(0).topics
    broker_cfg["delete.topic.enable"] = False
    assert "t" in cache.build(0).topics


def test_unclean_election_topic_override_wins(cache, broker_cfg):
    assert cache.unclean("t") is False
    cache.configs["t"] = {"unclean.leader.election.enable": "TRUE"}
    assert cache.unclean("t") is True
    broker_cfg["unclean.leader.election.enable"] = True
    cache.configs["t"] = {"unclean.leader.election.enable": "false"}
    assert cache.unclean("t") is False


def test_drop_topic(cache):
    fill(cache, topics={"t": {0: (1,)}, "u": {0: (1,)}},
         states={("t", 0): (1, (1,)), ("u", 0): (1, (1,))})
    cache.drop_topic("t")
    assert list(cache.topics) == ["u"] and list(cache.states) == [("u", 0)]


def test_a_topic_shown_in_part_keeps_its_whole_partition_count(cache):
    # the controller initializes a new topic's partitions one by one: what maps a key to
    # a partition (group and transaction coordinators) must see 3 partitions throughout
    fill(cache, brokers=(1, 2), topics={"__consumer_offsets": {0: (1,), 1: (2,), 2: (1,)}},
         states={("__consumer_offsets", 0): (1, (1,))})
    t = cache.build(0).topics["__consumer_offsets"]
    assert list(t.partitions) == [0] and t.partition_count == 3 and t.num_partitions == 3
    fill(cache, states={("__consumer_offsets", 1): (2, (2,)), ("__consumer_offsets", 2): (1, (1,))})
    t = cache.build(1).topics["__consumer_offsets"]
    assert len(t.partitions) == 3 and t.partition_count == -1 and t.num_partitions == 3


def test_validation_sees_every_partition_of_a_topic_shown_in_part(cache):
    # CreatePartitions on a topic still being initialized must count its 3 partitions,
    # not the 1 shown (it would hand out ids already assigned)
    from mpbroker.controller.zk.admin import TopicAdmin

    fill(cache, brokers=(1, 2), topics={"t": {0: (1,), 1: (2,), 2: (1,)}, "u": {0: (2,)}},
         states={("t", 0): (1, (1,))})
    admin = TopicAdmin.__new__(TopicAdmin)
    admin.cache, admin._metadata = cache, lambda: cache.build(0)
    view = admin.view_for_create()
    t = view.topics["t"]
    assert sorted(t.partitions) == [0, 1, 2] and t.num_partitions == 3 and t.partition_count == -1
    assert t.partitions[0].leader == 1 and t.partitions[1].leader == -1   # shown state kept
    assert sorted(view.topics["u"].partitions) == [0]                     # not shown at all
