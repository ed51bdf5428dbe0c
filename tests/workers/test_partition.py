"""workers/partition.py: the leader-epoch fencing check of partition-scoped requests."""
from mpbroker.protocol.errors import ErrorCode
from storage.log import Log, LogConfig
from workers.partition import Partition


def test_leader_epoch_error(tmp_path):
    p = Partition("t", 0, b"\x01" * 16, Log.open(str(tmp_path / "t-0"), LogConfig()),
                  leader_epoch=5)
    try:
        assert p.leader_epoch_error(-1) == ErrorCode.NONE      # not given
        assert p.leader_epoch_error(5) == ErrorCode.NONE
        assert p.leader_epoch_error(4) == ErrorCode.FENCED_LEADER_EPOCH
        assert p.leader_epoch_error(6) == ErrorCode.UNKNOWN_LEADER_EPOCH
    finally:
        p.close()
