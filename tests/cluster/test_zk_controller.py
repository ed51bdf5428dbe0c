"""ZkController in this process against the real ZooKeeper server (no broker processes):
alter_partition's conditional update, and the fencing of a deposed controller."""
from __future__ import annotations

import asyncio
import json

from mpbroker import config as configmod
from mpbroker.controller.zk import ZkController
from mpbroker.protocol.errors import ErrorCode


def make(zookeeper, tmp_path, chroot, broker_id):
    cfg = configmod.BrokerConfig({
        "broker.id": str(broker_id), "log.dirs": str(tmp_path / f"d{broker_id}"),
        "zookeeper.connect": f"{zookeeper.connect}{chroot}",
        "zookeeper.session.timeout.ms": "4000", "listeners": "PLAINTEXT://127.0.0.1:0"})
    return ZkController(cfg, ("127.0.0.1", 9000 + broker_id))


class Pushes:
    def __init__(self):
        self.mds = []

    def apply_metadata(self, md):
        self.mds.append(md)


async def until(pred, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


def test_alter_partition_and_controller_fencing(zookeeper, tmp_path):
    async def main():
        a = make(zookeeper, tmp_path, "/zkc", 1)
        b = make(zookeeper, tmp_path, "/zkc", 2)
        pushes = Pushes()
        a.workers.append(pushes)
        try:
            await a.start()
            await b.start()
            assert a.active and not b.active and b.controller_id == 1
            res = await b.create_topics([{"name": "t", "num_partitions": 1, "replication_factor": 2,
                                          "assignments": {}, "configs": []}], False, 10000)
            assert res[0]["error_code"] == 0, res
            await until(lambda: "t" in a.md.topics and "t" in b.md.topics)
            st = b.md.topics["t"].partitions[0]
            assert set(st.isr) == {1, 2}
            leader, follower = st.leader, ({1, 2} - {st.leader}).pop()
            owner = a if leader == 1 else b
            # the leader shrinks the ISR to itself
            code, new = await owner.alter_partition("t", 0, leader, st.leader_epoch, st.partition_epoch,
                                                    [leader])
            assert code == ErrorCode.NONE and new.isr == (leader,)
            assert new.partition_epoch == st.partition_epoch + 1
            other = b if owner is a else a
            await until(lambda: other.md.topics["t"].partitions[0].isr == (leader,))
            # a stale partition epoch, a stale leader epoch, a non-leader, a bad ISR
            code, cur = await owner.alter_partition("t", 0, leader, st.leader_epoch, st.partition_epoch,
                                                    [leader, follower])
            assert code == ErrorCode.INVALID_UPDATE_VERSION and cur.isr == (leader,)
            code, _ = await owner.alter_partition("t", 0, leader, st.leader_epoch - 1, new.partition_epoch,
                                                  [leader, follower])
            assert code == ErrorCode.FENCED_LEADER_EPOCH
            code, _ = await owner.alter_partition("t", 0, follower, st.leader_epoch, new.partition_epoch,
                                                  [follower])
            assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            code, _ = await owner.alter_partition("t", 0, leader, st.leader_epoch, new.partition_epoch,
                                                  [leader, 7])
            assert code == ErrorCode.INVALID_REQUEST
            state = json.loads(a.zk.get("/brokers/topics/t/partitions/0/state")[0])
            assert state["isr"] == [leader]
            # the pushed views have strictly increasing epochs
            epochs = [m.epoch for m in pushes.mds]
            assert epochs == sorted(set(epochs))

            # fencing: someone else bumped /controller_epoch (a newer controller elsewhere);
            # the old controller's next write must fail and it must resign
            data, stat = a.zk.get("/controller_epoch")
            a.zk.set("/controller_epoch", str(int(data) + 1).encode(), version=stat.version)
            before = a.zk.get("/brokers/topics/t/partitions/0/state")
            ok = await a._write_state("t", 0, follower, (follower,), a.states[("t", 0)])
            assert ok is False and not a.active
            assert a.zk.get("/brokers/topics/t/partitions/0/state")[1].version == before[1].version
        finally:
            a.close()
            b.close()
    asyncio.run(main())


def test_producer_id_blocks_are_unique_across_brokers(zookeeper, tmp_path):
    async def main():
        a = make(zookeeper, tmp_path, "/pids", 1)
        b = make(zookeeper, tmp_path, "/pids", 2)
        try:
            await a.start()
            await b.start()
            ids = await asyncio.gather(*[x.allocate_producer_id() for x in (a, b) for _ in range(3)])
            assert len(set(ids)) == 6
            blk = json.loads(a.zk.get("/latest_producer_id_block")[0])
            assert blk["version"] == 1 and int(blk["block_end"]) == 1999
        finally:
            a.close()
            b.close()
    asyncio.run(main())
