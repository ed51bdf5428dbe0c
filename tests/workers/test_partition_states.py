"""workers/partition_states.py: what an owner publishes of its partitions, to whom and
when, and a front's copy of it."""
from __future__ import annotations

import types

from workers.fetch_session import CachedPartition
from workers.partition_states import POSITIONS_KEPT, Publisher, RemoteStates, state_of


def part(hw=5, lso=4, start=1, epoch=3, appended=50, committed=40, point=None, **kw):
    """A partition whose log's `read_point` is `point`."""
    log = types.SimpleNamespace(read_point=lambda h, l: point)
    return types.SimpleNamespace(high_watermark=hw, last_stable_offset=lso, log_start_offset=start,
                                 leader_epoch=epoch, bytes_appended=appended,
                                 bytes_committed=committed, closed=False, moving=False,
                                 is_leader=True, log=log, **kw)


def test_state_of_a_partition_and_of_one_not_servable_here():
    assert state_of(part()) == (5, 4, 1, 3, 50, 40, None)
    point = ("/d/t-0/0.log", 1, 2, 500, 400, -1)
    assert state_of(part(point=point)) == (5, 4, 1, 3, 50, 40, point)
    assert state_of(None) is None
    for gone in ({"closed": True}, {"is_leader": False}):
        p = part()
        vars(p).update(gone)
        assert state_of(p) is None
    p = part()
    p.moving = True                     # between log dirs: it still serves reads
    assert state_of(p) == (5, 4, 1, 3, 50, 40, None)


def cp(offset, epoch=-1, index=0):
    return CachedPartition("t", b"\1" * 16, index, offset, 1000, -1, epoch)


def test_a_consumer_is_quiet_only_when_caught_up_on_the_owner_that_published():
    states = RemoteStates()
    assert states.update(2, [("t", 0, (5, 4, 1, 3, 50, 40, None))], subscribed=True) == [("t", 0)]
    assert states.quiet(cp(5), 2, committed=False).high_watermark == 5
    assert states.quiet(cp(4), 2, committed=True) is not None      # read_committed: the LSO
    assert states.quiet(cp(4), 2, committed=False) is None         # behind: records to read
    assert states.quiet(cp(6), 2, committed=False) is None         # past it: the owner tells
    assert states.quiet(cp(5, epoch=3), 2, committed=False) is not None
    assert states.quiet(cp(5, epoch=2), 2, committed=False) is None     # fenced: the owner tells
    assert states.quiet(cp(5), 1, committed=False) is None         # another owner now
    assert states.quiet(cp(5, index=1), 2, committed=False) is None    # never published
    answer = states.get(("t", 0)).answer(0, committed=True)
    assert (answer["high_watermark"], answer["last_stable_offset"], answer["log_start_offset"],
            answer["records"], answer["aborted_transactions"]) == (5, 4, 1, [], [])


def test_updates_gone_and_a_closed_channel():
    states = RemoteStates()
    states.update(2, [("t", 0, (5, 5, 0, 0, 1, 1, None))])     # published, never subscribed here
    assert states.get(("t", 0)) is None
    states.update(2, [("t", 0, (5, 5, 0, 0, 1, 1, None)), ("t", 1, (7, 7, 0, 0, 1, 1, None))],
                  subscribed=True)
    st = states.get(("t", 0))
    states.update(2, [("t", 0, (6, 6, 0, 0, 9, 9, None))])
    assert states.get(("t", 0)) is st and (st.high_watermark, st.bytes_committed) == (6, 9)
    states.update(3, [("t", 0, None)])          # another worker's "gone": not this one's
    assert states.get(("t", 0)) is st
    states.update(2, [("t", 0, None)])
    assert states.get(("t", 0)) is None
    assert states.drop_owner(2) == [("t", 1)] and states.states == {}


def test_the_publisher_sends_subscribed_changes_once_per_iteration():
    parts = {("t", 0): part(), ("t", 1): part(hw=9)}
    sent, soon = [], []
    pub = Publisher(lambda t, i: parts.get((t, i)), lambda peer, ps: sent.append((peer, ps)),
                    soon.append)
    assert pub.subscribe(7, [("t", 0), ("t", 5)]) == [("t", 0, state_of(parts[("t", 0)]))]
    pub.subscribe(8, [("t", 0)])
    pub.changed(("t", 1))                       # nobody asked for it
    assert not soon
    parts[("t", 0)].high_watermark = 6
    pub.changed(("t", 0))
    pub.changed(("t", 0))
    assert len(soon) == 1 and not sent          # one flush, at the end of the iteration
    soon.pop()()
    assert sorted(sent) == [(7, [("t", 0, (6, 4, 1, 3, 50, 40, None))]),
                            (8, [("t", 0, (6, 4, 1, 3, 50, 40, None))])]
    sent.clear()
    pub.unsubscribe_peer(8)
    del parts[("t", 0)]                         # moved away: published as gone, once
    pub.changed(("t", 0))
    soon.pop()()
    assert sent == [(7, [("t", 0, None)])] and pub.subscribers == {}
    pub.changed(("t", 0))
    assert not soon


def test_a_sweep_drops_what_no_fetch_read_and_names_the_owners_to_tell():
    states = RemoteStates()
    states.update(2, [("t", 0, (5, 5, 0, 0, 1, 1, None)), ("t", 1, (5, 5, 0, 0, 1, 1, None))],
                  subscribed=True)
    states.update(3, [("u", 0, (5, 5, 0, 0, 1, 1, None))], subscribed=True)
    states.used.add(("u", 0))                       # asked (Router.forward marks it)
    assert states.quiet(cp(5), 2, committed=False) is not None       # read from the copy
    assert states.sweep() == {2: [("t", 1)]}
    assert sorted(states.states) == [("t", 0), ("u", 0)]
    assert states.sweep() == {2: [("t", 0)], 3: [("u", 0)]} and states.states == {}
    states.update(2, [("t", 0, (6, 6, 0, 0, 2, 2, None))])     # a change still in flight: stays out
    assert states.states == {}


def test_an_unsubscribed_front_hears_no_more():
    parts = {("t", 0): part()}
    sent, soon = [], []
    pub = Publisher(lambda t, i: parts.get((t, i)), lambda peer, ps: sent.append(peer),
                    soon.append)
    pub.subscribe(7, [("t", 0)])
    pub.subscribe(8, [("t", 0)])
    pub.unsubscribe(7, [["t", 0], ["t", 9]])         # as they cross the mesh: lists
    pub.changed(("t", 0))
    soon.pop()()
    assert sent == [8]
    pub.unsubscribe(8, [("t", 0)])
    assert pub.subscribers == {}


def test_a_check_without_a_change_publishes_nothing_and_a_later_subscriber_misses_nothing():
    """A metadata push checks every partition: unchanged states are not sent again. A
    front that subscribes meanwhile gets the state with its answer; the others still
    hear the change from the flush."""
    parts = {("t", 0): part()}
    sent, soon = [], []
    pub = Publisher(lambda t, i: parts.get((t, i)), lambda peer, ps: sent.append((peer, ps)),
                    soon.append)
    pub.subscribe(7, [("t", 0)])
    parts[("t", 0)].high_watermark = 6
    pub.changed(("t", 0))
    soon.pop()()
    assert [peer for peer, _ in sent] == [7]
    pub.changed(("t", 0))                       # checked, not changed
    soon.pop()()
    assert len(sent) == 1
    parts[("t", 0)].high_watermark = 7
    pub.changed(("t", 0))
    pub.subscribe(8, [("t", 0)])                # told 7 with its answer
    soon.pop()()
    assert sorted(peer for peer, _ in sent[1:]) == [7, 8]


def point(hw_pos, lso_pos=None, abort_end=-1, path="/d/t-0/00.log", ino=2):
    return (path, 1, ino, hw_pos, hw_pos if lso_pos is None else lso_pos, abort_end)


def test_a_copy_reads_from_a_position_it_was_told_up_to_the_high_watermark():
    states = RemoteStates()
    states.update(2, [("t", 0, (5, 5, 1, 3, 50, 50, point(100)))], subscribed=True)
    states.update(2, [("t", 0, (8, 8, 1, 3, 80, 80, point(300)))])
    st, sl = states.read(cp(5), 2, committed=False, limit=1000)
    assert st is states.get(("t", 0))
    assert sl == ("/d/t-0/00.log", 100, 200, -1, 1, 2)
    assert states.read(cp(5), 2, committed=False, limit=200)[1].length == 200
    assert states.read(cp(5), 2, committed=False, limit=199) is None     # not whole: ask
    assert states.read(cp(6), 2, committed=False, limit=1000) is None    # position unknown
    assert states.read(cp(8), 2, committed=False, limit=1000) is None    # caught up: nothing
    assert states.read(cp(5, epoch=2), 2, committed=False, limit=1000) is None
    assert states.read(cp(5, epoch=3), 2, committed=False, limit=1000) is not None
    assert states.read(cp(5), 1, committed=False, limit=1000) is None    # another owner
    assert states.read(cp(5, index=1), 2, committed=False, limit=1000) is None
    states.update(2, [("t", 0, (8, 8, 6, 3, 80, 80, point(300)))])       # log start past it
    assert states.read(cp(5), 2, committed=False, limit=1000) is None


def test_read_committed_reads_to_the_lso_and_not_over_an_aborted_transaction():
    states = RemoteStates()
    states.update(2, [("t", 0, (5, 5, 0, 3, 50, 50, point(100)))], subscribed=True)
    states.update(2, [("t", 0, (9, 7, 0, 3, 90, 70, point(400, 250)))])
    assert states.read(cp(5), 2, committed=True, limit=1000)[1][1:3] == (100, 150)
    assert states.read(cp(5), 2, committed=False, limit=1000)[1][1:3] == (100, 300)
    assert states.read(cp(7), 2, committed=True, limit=1000) is None     # at the LSO
    assert states.read(cp(7), 2, committed=False, limit=1000)[1][1:3] == (250, 150)
    states.update(2, [("t", 0, (9, 9, 0, 3, 90, 90, point(400, abort_end=8)))])
    assert states.read(cp(7), 2, committed=True, limit=1000) is None     # its aborts: ask
    assert states.read(cp(7), 2, committed=False, limit=1000) is not None
    states.update(2, [("t", 0, (9, 9, 0, 3, 90, 90, point(400, abort_end=6)))])
    assert states.read(cp(7), 2, committed=True, limit=1000)[1][1:3] == (250, 150)


def test_positions_are_forgotten_with_the_segment_and_the_leader_epoch():
    states = RemoteStates()
    states.update(2, [("t", 0, (5, 5, 0, 3, 50, 50, point(100)))], subscribed=True)
    states.update(2, [("t", 0, (8, 8, 0, 3, 80, 80, point(0, path="/d/t-0/08.log", ino=3)))])
    assert states.read(cp(5), 2, committed=False, limit=1000) is None    # rolled
    states.update(2, [("t", 0, (9, 9, 0, 3, 90, 90, point(70, path="/d/t-0/08.log", ino=3)))])
    assert states.read(cp(8), 2, committed=False, limit=1000)[1][1:3] == (0, 70)
    states.update(2, [("t", 0, (9, 9, 0, 4, 90, 90, point(70, path="/d/t-0/08.log", ino=3)))])
    states.update(2, [("t", 0, (10, 10, 0, 4, 99, 99, point(90, path="/d/t-0/08.log", ino=3)))])
    assert states.read(cp(8), 2, committed=False, limit=1000) is None    # a new epoch
    assert states.read(cp(9), 2, committed=False, limit=1000)[1][1:3] == (70, 20)
    states.update(2, [("t", 0, (10, 10, 0, 4, 99, 99, None))])            # HW before the segment
    assert states.read(cp(9), 2, committed=False, limit=1000) is None
    st = states.get(("t", 0))
    for hw in range(20, 20 + POSITIONS_KEPT + 5):
        st.set((hw, hw, 0, 4, hw, hw, point(hw * 10)))
    assert len(st.positions) == POSITIONS_KEPT and 20 not in st.positions
    for hw in range(100, 100 + POSITIONS_KEPT):      # HW and LSO both new each time
        st.set((hw, hw - 50, 0, 4, hw, hw, point(hw * 10, (hw - 50) * 10)))
    assert len(st.positions) == POSITIONS_KEPT


def test_served_bytes_are_told_to_each_owner_once():
    states = RemoteStates()
    states.count_served(2, ("t", 0), 100)
    states.count_served(2, ("t", 0), 50)
    states.count_served(3, ("u", 1), 7)
    assert states.take_served() == {2: [("t", 0, 150)], 3: [("u", 1, 7)]}
    assert states.take_served() == {}
    states.count_served(2, ("t", 0), 9)
    states.drop_owner(2)                        # restarted: its counters start again
    assert states.take_served() == {}
