"""The transaction state machine (workers/txn/state.py): Kafka's transitions, epoch
bumps, KIP-360 retries, fencing and rotation."""
import pytest

from workers.txn import state as S
from workers.txn.state import IllegalTransition, TransactionMetadata


def new(epoch=S.NO_PRODUCER_EPOCH, state=S.EMPTY, **kw):
    return TransactionMetadata("t", 100, epoch, 60000, state, **kw)


def test_partition_for_matches_kafka_hash():
    # Utils.abs("my-txn".hashCode()) % 50; "my-txn".hashCode() == -1061187895 (s[0]*31^(n-1)
    # + ... over UTF-16 units, int32 wrap-around)
    assert S.partition_for("my-txn", 50) == 1061187895 % 50 == 45


def test_first_init_bumps_to_epoch_zero():
    m = new()
    code, t = m.prepare_increment_epoch(30000, None, now=5)
    assert code == 0 and m.pending_state == S.EMPTY
    m.complete(t)
    assert (m.producer_epoch, m.state, m.txn_timeout_ms, m.pending) == (0, S.EMPTY, 30000, False)


def test_full_cycle_commit():
    m = new(epoch=0)
    t = m.prepare_add_partitions([("a", 0)], now=10)
    m.complete(t)
    assert m.state == S.ONGOING and m.start_ms == 10
    m.complete(m.prepare_add_partitions([("b", 1)], now=20))
    assert m.start_ms == 10 and m.partitions == {("a", 0), ("b", 1)}
    m.complete(m.prepare_abort_or_commit(True, now=30))
    assert m.state == S.PREPARE_COMMIT
    v = m.prepare_complete(now=40)
    assert v.to_value().partitions == {}
    m.complete(v)
    assert m.state == S.COMPLETE_COMMIT and m.partitions == set()
    # the next transaction starts a new clock
    m.complete(m.prepare_add_partitions([("a", 0)], now=50))
    assert m.start_ms == 50


def test_prepare_value_lists_partitions():
    m = new(epoch=0)
    m.complete(m.prepare_add_partitions([("a", 1), ("a", 0)], now=1))
    t = m.prepare_abort_or_commit(False, now=2)
    assert t.to_value().partitions == {"a": [0, 1]} and t.to_value().state == S.PREPARE_ABORT


@pytest.mark.parametrize("frm,to", [
    (S.EMPTY, S.PREPARE_COMMIT), (S.EMPTY, S.COMPLETE_ABORT), (S.ONGOING, S.EMPTY),
    (S.PREPARE_COMMIT, S.ONGOING), (S.PREPARE_COMMIT, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, S.COMPLETE_ABORT), (S.ONGOING, S.DEAD),
])
def test_invalid_transitions(frm, to):
    m = new(epoch=0, state=frm)
    with pytest.raises(IllegalTransition):
        m._prepare(to, now=1)
    assert m.pending_state is None


def test_pending_blocks_other_transitions_and_abort_clears():
    m = new(epoch=0)
    m.prepare_add_partitions([("a", 0)], now=1)
    with pytest.raises(IllegalTransition):
        m.prepare_add_partitions([("b", 0)], now=2)
    m.abort_pending()
    assert m.state == S.EMPTY and not m.pending


def test_kip360_expected_epoch():
    m = new(epoch=5)
    code, t = m.prepare_increment_epoch(1000, 5, now=1)   # current epoch: bump
    assert code == 0 and (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    m.complete(t)
    code, t = m.prepare_increment_epoch(1000, 5, now=2)   # retry of that bump: same epoch
    assert code == 0 and t.producer_epoch == 6
    m.abort_pending()
    code, t = m.prepare_increment_epoch(1000, 3, now=3)   # anything else: fenced
    assert code == 90 and t is None and not m.pending


def test_fence_then_abort_uses_bumped_epoch_and_undo_restores():
    m = new(epoch=4, state=S.ONGOING, partitions=[("a", 0)])
    m.fence_epoch()
    assert m.producer_epoch == 5 and m.pending_state == S.PREPARE_EPOCH_FENCE
    t = m.prepare_abort_or_commit(False, now=9)
    assert t.state == S.PREPARE_ABORT and t.producer_epoch == 5
    m.abort_pending()     # the append failed: the fence is undone
    assert m.producer_epoch == 4 and m.state == S.ONGOING and not m.pending
    m.fence_epoch()
    m.complete(m.prepare_abort_or_commit(False, now=10))
    assert m.state == S.PREPARE_ABORT and m.producer_epoch == 5


def test_fence_only_from_ongoing():
    with pytest.raises(IllegalTransition):
        new(epoch=1).fence_epoch()


def test_epoch_exhaustion_and_rotation():
    assert not S.is_epoch_exhausted(32765) and S.is_epoch_exhausted(32766)
    m = new(epoch=32766)
    with pytest.raises(IllegalTransition):
        m.prepare_increment_epoch(1000, None, now=1)
    t = m.prepare_rotation(200, 1000, now=1, record_last_epoch=True)
    m.complete(t)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id, m.last_producer_epoch) == \
        (200, 0, 100, 32766)


def test_dead_from_complete_only():
    m = new(epoch=0, state=S.COMPLETE_ABORT)
    m.complete(m.prepare_dead(now=1))
    assert m.state == S.DEAD


def test_from_value_roundtrip():
    m = new(epoch=3)
    m.complete(m.prepare_add_partitions([("x", 2)], now=7))
    t = m.prepare_abort_or_commit(True, now=8)
    m2 = TransactionMetadata.from_value("t", t.to_value())
    assert (m2.producer_id, m2.producer_epoch, m2.state, m2.partitions, m2.start_ms) == \
        (100, 3, S.PREPARE_COMMIT, {("x", 2)}, 7)
