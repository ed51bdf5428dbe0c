"""The AlterPartition checks both controllers apply (pure)."""
from mpbroker.controller import isr_change
from mpbroker.protocol.errors import ErrorCode


def check(req_leader=1, req_leader_epoch=5, req_partition_epoch=9, new_isr=(1, 2), eligible=None):
    # the partition: leader 1, leader epoch 5, partition epoch 9, replicas 1-3, ISR [1]
    return isr_change.check(1, 5, 9, (1, 2, 3), (1,), req_leader, req_leader_epoch,
                            req_partition_epoch, new_isr, eligible)


def test_accepted():
    assert check() == ErrorCode.NONE
    assert check(new_isr=(1,)) == ErrorCode.NONE


def test_fencing_in_kafkas_order():
    assert check(req_leader=2, req_leader_epoch=4) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert check(req_leader_epoch=4, req_partition_epoch=8) == ErrorCode.FENCED_LEADER_EPOCH
    assert check(req_partition_epoch=8) == ErrorCode.INVALID_UPDATE_VERSION


def test_invalid_isr():
    assert check(new_isr=(2,)) == ErrorCode.INVALID_REQUEST          # without the leader
    assert check(new_isr=(1, 5)) == ErrorCode.INVALID_REQUEST        # not a replica
    assert check(new_isr=(1, 2, 2)) == ErrorCode.INVALID_REQUEST     # duplicates


def test_isr_grows_only_by_eligible_brokers():
    assert check(new_isr=(1, 2), eligible={1, 3}) == ErrorCode.INELIGIBLE_REPLICA
    assert check(new_isr=(1, 2), eligible={1, 2}) == ErrorCode.NONE
    assert check(new_isr=(1,), eligible=set()) == ErrorCode.NONE     # shrinking is always fine
