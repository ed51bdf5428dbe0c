"""Reassignment state in the topic znode (mpbroker/controller/zk/reassignment.py)."""
from mpbroker.controller import zkdata
from mpbroker.controller.zk.reassignment import reassignment_of


def test_reassignment_of():
    ta = zkdata.TopicAssignment(None, {0: (4, 5, 1, 2), 1: (1, 2)}, {0: (4, 5)}, {0: (1, 2)})
    assert reassignment_of(ta, 0) == ((4, 5, 1, 2), (4, 5), (1, 2))   # RS, target, original
    assert reassignment_of(ta, 1) == ((1, 2), None, (1, 2))           # nothing ongoing
