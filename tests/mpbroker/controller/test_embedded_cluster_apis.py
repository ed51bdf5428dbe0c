"""The single-broker EmbeddedController's alter_partition / elect_leaders /
controlled_shutdown (same contracts as the ZooKeeper controller)."""
import asyncio

from mpbroker.protocol.errors import ErrorCode
from tests.mpbroker.controller.embedded_harness import make


def test_alter_partition(tmp_path):
    ctl = make(tmp_path)

    async def main():
        await ctl.create_topics([{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                  "assignments": {}, "configs": []}], False, 1000)
        st = ctl.md.topics["t"].partitions[0]
        code, new = await ctl.alter_partition("t", 0, 1, st.leader_epoch, st.partition_epoch, [1])
        assert code == ErrorCode.NONE and new.partition_epoch == st.partition_epoch + 1
        assert (await ctl.alter_partition("t", 0, 1, st.leader_epoch, st.partition_epoch, [1]))[0] \
            == ErrorCode.INVALID_UPDATE_VERSION
        assert (await ctl.alter_partition("t", 0, 1, st.leader_epoch + 1, new.partition_epoch, [1]))[0] \
            == ErrorCode.FENCED_LEADER_EPOCH
        assert (await ctl.alter_partition("t", 0, 2, st.leader_epoch, new.partition_epoch, [2]))[0] \
            == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (await ctl.alter_partition("t", 0, 1, st.leader_epoch, new.partition_epoch, [1, 5]))[0] \
            == ErrorCode.INVALID_REQUEST
        assert (await ctl.alter_partition("nope", 0, 1, 0, 0, [1]))[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # persisted: a new controller on the same dir sees the new partition epoch
        again = make(tmp_path)
        assert again.md.topics["t"].partitions[0].partition_epoch == new.partition_epoch
        assert await ctl.elect_leaders(0, [("t", 0), ("x", 0)]) == (ErrorCode.NONE, [
            ("t", 0, ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
            ("x", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")])
        assert await ctl.controlled_shutdown(1, -1) == (ErrorCode.NONE, [])
    asyncio.run(main())
