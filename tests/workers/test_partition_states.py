"""workers/partition_states.py: what an owner publishes of its partitions, to whom and
when, and a front's copy of it."""
from __future__ import annotations

import types

from workers.fetch_session import CachedPartition
from workers.partition_states import Publisher, RemoteStates, state_of


def part(hw=5, lso=4, start=1, epoch=3, appended=50, committed=40, **kw):
    return types.SimpleNamespace(high_watermark=hw, last_stable_offset=lso, log_start_offset=start,
                                 leader_epoch=epoch, bytes_appended=appended,
                                 bytes_committed=committed, closed=False, moving=False,
                                 is_leader=True, **kw)


def test_state_of_a_partition_and_of_one_not_servable_here():
    assert state_of(part()) == (5, 4, 1, 3, 50, 40)
    assert state_of(None) is None
    for gone in ({"closed": True}, {"is_leader": False}):
        p = part()
        vars(p).update(gone)
        assert state_of(p) is None
    p = part()
    p.moving = True                     # between log dirs: it still serves reads
    assert state_of(p) == (5, 4, 1, 3, 50, 40)


def cp(offset, epoch=-1, index=0):
    return CachedPartition("t", b"\1" * 16, index, offset, 1000, -1, epoch)


def test_a_consumer_is_quiet_only_when_caught_up_on_the_owner_that_published():
    states = RemoteStates()
    assert states.update(2, [("t", 0, (5, 4, 1, 3, 50, 40))], subscribed=True) == [("t", 0)]
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
    states.update(2, [("t", 0, (5, 5, 0, 0, 1, 1))])     # published, never subscribed here
    assert states.get(("t", 0)) is None
    states.update(2, [("t", 0, (5, 5, 0, 0, 1, 1)), ("t", 1, (7, 7, 0, 0, 1, 1))],
                  subscribed=True)
    st = states.get(("t", 0))
    states.update(2, [("t", 0, (6, 6, 0, 0, 9, 9))])
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
    assert sorted(sent) == [(7, [("t", 0, (6, 4, 1, 3, 50, 40))]),
                            (8, [("t", 0, (6, 4, 1, 3, 50, 40))])]
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
    states.update(2, [("t", 0, (5, 5, 0, 0, 1, 1)), ("t", 1, (5, 5, 0, 0, 1, 1))],
                  subscribed=True)
    states.update(3, [("u", 0, (5, 5, 0, 0, 1, 1))], subscribed=True)
    states.used.add(("u", 0))                       # asked (Router.forward marks it)
    assert states.quiet(cp(5), 2, committed=False) is not None       # read from the copy
    assert states.sweep() == {2: [("t", 1)]}
    assert sorted(states.states) == [("t", 0), ("u", 0)]
    assert states.sweep() == {2: [("t", 0)], 3: [("u", 0)]} and states.states == {}
    states.update(2, [("t", 0, (6, 6, 0, 0, 2, 2))])     # a change still in flight: stays out
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
