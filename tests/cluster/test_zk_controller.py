"""ZkController in this process against the real ZooKeeper server (no broker processes):
alter_partition's conditional update and its refusal of ineligible replicas, the fencing
of a deposed controller (state, assignment, partition, deletion and /admin writes),
StopReplica without delete, controlled shutdown retries that cannot move a leadership,
the /admin/preferred_replica_election znode, /isr_change_notification entries.

Controller -> broker requests go to the advertised 127.0.0.1:900<id>, where nothing
listens here: they fail and are logged (tests/cluster/test_*.py cover them)."""
from __future__ import annotations

import asyncio
import json
import logging

from mpbroker import config as configmod
from mpbroker.controller import zkdata
from mpbroker.controller.zk import ZkController
from mpbroker.protocol.errors import ErrorCode


def make(zookeeper, tmp_path, chroot, broker_id, **overrides):
    cfg = configmod.BrokerConfig({
        "broker.id": str(broker_id), "log.dirs": str(tmp_path / f"d{broker_id}"),
        "zookeeper.connect": f"{zookeeper.connect}{chroot}",
        "zookeeper.session.timeout.ms": "4000", "listeners": "PLAINTEXT://127.0.0.1:0",
        **{k.replace("_", "."): str(v) for k, v in overrides.items()}})
    return ZkController(cfg, ("127.0.0.1", 9000 + broker_id))


async def create(ctl, name, assignments):
    await until(lambda: {r for ar in assignments.values() for r in ar} <= set(ctl.md.brokers))
    res = await ctl.create_topics([{"name": name, "num_partitions": -1, "replication_factor": -1,
                                    "assignments": assignments, "configs": []}], False, 10000)
    assert res[0]["error_code"] == 0, res


async def stop_loop(ctl):
    """Stop the controller's own loop (no background work: the test drives it)."""
    ctl._task.cancel()
    try:
        await ctl._task
    except asyncio.CancelledError:
        pass


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
            assert a.controllership.active and not b.controllership.active and b.cache.controller_id == 1
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
            ok = await a.controllership.write_state("t", 0, follower, (follower,), a.cache.states[("t", 0)])
            assert ok is False and not a.controllership.active
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


def test_isr_grows_only_by_registered_brokers_not_shutting_down(zookeeper, tmp_path):
    async def main():
        a, b, c = (make(zookeeper, tmp_path, "/eligible", i) for i in (1, 2, 3))
        try:
            for x in (a, b, c):
                await x.start()
            assert a.controllership.active
            await create(b, "t", {0: [1, 2, 3]})
            await until(lambda: "t" in a.md.topics)

            async def alter(isr):
                st = a.md.topics["t"].partitions[0]
                assert st.leader == 1
                return (await a.alter_partition("t", 0, 1, st.leader_epoch, st.partition_epoch, isr))[0]
            assert await alter([1]) == ErrorCode.NONE
            assert await alter([1, 2]) == ErrorCode.NONE       # alive, not shutting down
            assert await alter([1]) == ErrorCode.NONE
            c.close()                                            # broker 3 unregistered
            await until(lambda: 3 not in a.cache.brokers)
            assert await alter([1, 3]) == ErrorCode.INELIGIBLE_REPLICA
            code, remaining = await a.controlled_shutdown(2, b.broker_epoch)
            assert (code, remaining) == (ErrorCode.NONE, [])
            assert await alter([1, 2]) == ErrorCode.INELIGIBLE_REPLICA
            assert json.loads(a.zk.get("/brokers/topics/t/partitions/0/state")[0])["isr"] == [1]
            # StopReplica without delete (what the controller sends broker 2 now): broker 2
            # shows itself offline there, so its workers close the follower, keeping the log
            st = b.md.topics["t"].partitions[0]
            resp = await b.controller_request(5, 3, {
                "controller_id": 1, "controller_epoch": a.controllership.epoch, "broker_epoch": b.broker_epoch,
                "topic_states": [{"topic_name": "t", "partition_states": [
                    {"partition_index": 0, "leader_epoch": st.leader_epoch, "delete_partition": False}]}]})
            assert resp["error_code"] == 0 and resp["partition_errors"][0]["error_code"] == 0
            assert 2 in b.md.topics["t"].partitions[0].offline_replicas
            assert 2 not in a.md.topics["t"].partitions[0].offline_replicas
            assert "t" in b.md.topics                               # not deleted
        finally:
            for x in (a, b, c):
                x.close()
    asyncio.run(main())


def test_a_stale_controller_cannot_write(zookeeper, tmp_path):
    """/controller_epoch moved on (a newer controller elsewhere): every kind of write of
    the old controller fails, changes nothing, and it resigns."""
    async def main():
        a, b = make(zookeeper, tmp_path, "/stale", 1), make(zookeeper, tmp_path, "/stale", 2)
        try:
            await a.start()
            await b.start()
            await create(a, "t", {0: [1, 2]})
            await until(lambda: "t" in a.md.topics and "t" in b.md.topics)
            await stop_loop(a)
            zk = a.zk
            data, stat = zk.get("/controller_epoch")
            zk.set("/controller_epoch", str(int(data) + 1).encode(), version=stat.version)
            topic_before = zk.get("/brokers/topics/t")

            # reassignment (the topic znode)
            assert a.controllership.active
            assert await a.reassignments.write_assignment("t", {0: ((2, 1), (), ())}) is False
            assert not a.controllership.active
            # CreatePartitions served by the stale controller
            a.controllership.active = True
            res = await a.create_partitions([{"name": "t", "count": 2, "assignments": None}], False, 0)
            assert res[0]["error_code"] == ErrorCode.NOT_CONTROLLER and not a.controllership.active
            assert zk.get("/brokers/topics/t") == topic_before
            # ... and by a broker that read the controller epoch before it changed: refused
            # once, then (epoch read again) done
            res = await b.create_partitions([{"name": "t", "count": 2, "assignments": None}], False, 0)
            assert res[0]["error_code"] == ErrorCode.NOT_CONTROLLER
            res = await b.create_partitions([{"name": "t", "count": 2, "assignments": None}], False, 0)
            assert res[0]["error_code"] == 0
            assert sorted(json.loads(zk.get("/brokers/topics/t")[0])["partitions"]) == ["0", "1"]
            # topic deletion, every replica having answered
            zk.create("/admin/delete_topics/t")
            await a.cache.load_deletions()
            a.controllership.active, a.deletion.acked["t"] = True, {1, 2}
            await a.deletion.progress()
            assert not a.controllership.active
            assert zk.exists("/brokers/topics/t/partitions/0/state") and zk.exists("/admin/delete_topics/t")
            # the /admin and ISR notification cleanups
            zk.create(zkdata.PREFERRED_ELECTION, zkdata.partitions_json([("t", 0)]))
            zk.create(f"{zkdata.ISR_CHANGES}/isr_change_", zkdata.partitions_json([("t", 0)]), sequence=True)
            a.controllership.active = True
            await a._handle_admin()
            assert not a.controllership.active
            assert zk.exists(zkdata.PREFERRED_ELECTION) and zk.get_children(zkdata.ISR_CHANGES)
            # the state writes (fenced since before)
            a.controllership.active = True
            st = a.cache.states[("t", 0)]
            assert await a.controllership.write_state("t", 0, 2, (2,), st) is False and not a.controllership.active
        finally:
            a.close()
            b.close()
    asyncio.run(main())


def test_controlled_shutdown_retries_then_gives_up(zookeeper, tmp_path, caplog):
    """The stopping broker leads a partition whose ISR is only itself: the controller
    cannot move it; after controlled.shutdown.max.retries attempts the broker gives up
    (and stops: tests/cluster/test_failover.py)."""
    async def main():
        a = make(zookeeper, tmp_path, "/cs-retries", 1, controlled_shutdown_max_retries=3,
                 controlled_shutdown_retry_backoff_ms=100)
        b = make(zookeeper, tmp_path, "/cs-retries", 2)
        try:
            await a.start()
            await b.start()
            await create(a, "t", {0: [1, 2]})
            await until(lambda: "t" in a.md.topics)
            st = a.md.topics["t"].partitions[0]
            code, _ = await a.alter_partition("t", 0, 1, st.leader_epoch, st.partition_epoch, [1])
            assert code == ErrorCode.NONE
            caplog.set_level(logging.INFO, "mpbroker.controller.zk")
            assert await a.request_controlled_shutdown() is False
            messages = [r.getMessage() for r in caplog.records]
            attempts = [m for m in messages if "controlled shutdown attempt" in m]
            assert attempts == [f"controlled shutdown attempt {i}/3: error 0, 1 partitions still led"
                                for i in (1, 2, 3)]
            assert any("proceeding to an unclean shutdown" in m for m in messages)
            s = json.loads(a.zk.get("/brokers/topics/t/partitions/0/state")[0])
            assert s["leader"] == 1 and s["isr"] == [1]
        finally:
            a.close()
            b.close()
    asyncio.run(main())


def test_preferred_election_znode_and_isr_change_notifications(zookeeper, tmp_path):
    async def main():
        a = make(zookeeper, tmp_path, "/admin-znodes", 1, auto_leader_rebalance_enable="false")
        b = make(zookeeper, tmp_path, "/admin-znodes", 2, auto_leader_rebalance_enable="false")
        try:
            await a.start()
            await b.start()
            await create(a, "t", {0: [1, 2]})
            await until(lambda: "t" in a.md.topics and "t" in b.md.topics)
            zk = a.zk
            path = "/brokers/topics/t/partitions/0/state"
            data, stat = zk.get(path)
            st = json.loads(data)
            st.update(leader=2, leader_epoch=st["leader_epoch"] + 1)   # a past failover
            zk.set(path, json.dumps(st).encode(), version=stat.version)
            await until(lambda: a.md.topics["t"].partitions[0].leader == 2)
            # kafka-preferred-replica-election.sh --zookeeper writes this znode
            zk.create(zkdata.PREFERRED_ELECTION, zkdata.partitions_json([("t", 0)]))
            await until(lambda: not zk.exists(zkdata.PREFERRED_ELECTION)
                        and json.loads(zk.get(path)[0])["leader"] == 1)
            assert json.loads(zk.get(path)[0])["leader_epoch"] == st["leader_epoch"] + 1
            # an ISR change by the leader leaves a notification for the controller
            await stop_loop(a)                       # nobody consumes it meanwhile
            before = set(zk.get_children(zkdata.ISR_CHANGES))
            cur = a.md.topics["t"].partitions[0]
            code, _ = await a.alter_partition("t", 0, 1, cur.leader_epoch, cur.partition_epoch, [1])
            assert code == ErrorCode.NONE
            new = set(zk.get_children(zkdata.ISR_CHANGES)) - before
            assert len(new) == 1 and next(iter(new)).startswith("isr_change_")
            data = zk.get(f"{zkdata.ISR_CHANGES}/{new.pop()}")[0]
            assert json.loads(data) == {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}
            await until(lambda: b.md.topics["t"].partitions[0].isr == (1,))
            a._admin_dirty = True                    # the controller consumes it
            a._task = asyncio.get_running_loop().create_task(a._run())
            await until(lambda: not zk.get_children(zkdata.ISR_CHANGES))
        finally:
            a.close()
            b.close()
    asyncio.run(main())


def test_request_limits_in_cluster_mode(zookeeper, tmp_path):
    """The ZooKeeper controller applies the same limits as the embedded one (issue #15):
    KRaft's 9,999 partitions per request, max.broker.partitions, the KIP-599 quota."""
    async def main():
        a = make(zookeeper, tmp_path, "/zkl", 1, max_broker_partitions=10,
                 controller_mutation_rate=1, controller_quota_window_num=3)
        try:
            await a.start()
            await until(lambda: 1 in a.md.brokers)

            def spec(name, n):
                return {"name": name, "num_partitions": n, "replication_factor": 1,
                        "assignments": {}, "configs": []}
            res = await a.create_topics([spec("huge", 1_000_000)], False, 0, ("app", True))
            assert res[0]["error_code"] == ErrorCode.POLICY_VIOLATION
            res = await a.create_topics([spec("big", 11)], False, 0, ("app", True))
            assert res[0]["error_code"] == ErrorCode.POLICY_VIOLATION
            assert "max.broker.partitions" in res[0]["error_message"]
            res = await a.create_topics([spec("a", 4), spec("b", 1)], False, 10000, ("app", True))
            assert [r["error_code"] for r in res] == [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
            assert res.throttle_time_ms > 0 and not a.zk.exists("/brokers/topics/b")
            res = await a.create_partitions([{"name": "a", "count": 5, "assignments": None}],
                                            False, 0, ("app", True))
            assert res[0]["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
            res = await a.delete_topics([("a", None)], 0, ("app", True))
            assert res[0]["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        finally:
            a.close()
    asyncio.run(main())
