"""Topic deletion bookkeeping (mpbroker/controller/zk/deletion.py)."""
from types import SimpleNamespace

from mpbroker.controller.zk.deletion import TopicDeletion
from tests.mpbroker.controller.zk.conftest import fill


def make(cache, broker_cfg):
    return TopicDeletion(cache, SimpleNamespace(active=True), channel=None,
                         broker_cfg=lambda: broker_cfg)


def test_a_stop_replica_answer_acknowledges_the_topics_deleted_without_error(cache, broker_cfg):
    fill(cache, topics={"t": {0: (1, 2)}, "u": {0: (1, 2)}})
    cache.deleting = {"t", "u"}
    d = make(cache, broker_cfg)
    stop = {("t", 0): True, ("u", 0): True, ("v", 0): False}
    d.answered(2, stop, {"error_code": 0, "partition_errors": [
        {"topic_name": "u", "partition_index": 0, "error_code": 56}]})
    assert d.acked == {"t": {2}}
    d.answered(1, stop, {"error_code": 5})         # a refused request acknowledges nothing
    assert d.acked == {"t": {2}}


def test_resend_and_new_term(cache, broker_cfg):
    d = make(cache, broker_cfg)
    d.sent = {("t", 1): 10.0, ("t", 2): 10.0}
    d.resend_to(2)
    assert d.sent == {("t", 1): 10.0}
    d.acked = {"t": {1}}
    d.new_term()
    assert (d.acked, d.sent) == ({}, {})
