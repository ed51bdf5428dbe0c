"""The transaction coordinator (workers/txn/service.py) inside one real worker: a real
Broker with the embedded controller and real logs in a temporary directory (no network,
no mocks), an injected clock. Covers what the client tests cannot stage: replay of
`__transaction_state` after a restart (Ongoing and Prepare* left behind), the timeout
abort with its epoch bump, transactional.id expiration, epoch exhaustion, the loading
state."""
from __future__ import annotations

import asyncio


from mpbroker import config as configmod
from mpbroker.controller.embedded import EmbeddedController
from mpbroker.protocol.errors import ErrorCode as E
from storage.batch import iter_batches
from workers.worker import Worker
from workers.txn import records as rec
from workers.txn import state as S


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self):
        return self.now


class Ctx:
    api_version = 4


def make_broker(tmp_path, clock, **overrides):
    text = (f"broker.id=1\nlog.dirs={tmp_path}\nlisteners=PLAINTEXT://127.0.0.1:9092\n"
            "transaction.state.log.num.partitions=3\noffsets.topic.num.partitions=3\n")
    cfg = configmod.BrokerConfig.from_text(text, [f"{k}={v}" for k, v in overrides.items()])
    ctl = EmbeddedController(cfg)
    ctl.register_broker(1, "127.0.0.1", 9092)
    b = Worker(cfg, ctl, clock=clock)
    ctl.attach_worker(b)
    b.start(asyncio.get_running_loop())
    return b, ctl


async def settle(b):
    for _ in range(50):
        await asyncio.sleep(0.005)
        if not b.transactions._tasks:
            return


async def loaded(b):
    """Wait for the coordinators' background loads (they start when a partition of an
    internal topic becomes ours; requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS)."""
    for _ in range(400):
        if not any(ps.loading for ps in b.transactions.states.values()) and \
                not b.groups.loading():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("coordinator loads did not finish")


async def setup(b, ctl, topic="t", partitions=2):
    await ctl.ensure_internal_topic("__transaction_state")
    await ctl.create_topics([{"name": topic, "num_partitions": partitions,
                              "replication_factor": 1, "assignments": [], "configs": {}}],
                            False, 1000)
    await loaded(b)


async def init(b, tid, timeout_ms=60000):
    return await b.transactions.init_producer_id(
        Ctx(), {"transactional_id": tid, "transaction_timeout_ms": timeout_ms,
                "producer_id": -1, "producer_epoch": -1})


def markers(b, topic, index):
    """[(producer id, commit)] of the control batches in a partition's log."""
    lg = b.partition(topic, index).log
    data = lg.read_records_bytes(lg.log_start_offset, 1 << 20)
    out = []
    for batch in iter_batches(memoryview(data)):
        if batch.is_control:
            key = next(batch.records()).key
            out.append((batch.producer_id, key[3] == 1))
    return out


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_commit_writes_markers_and_survives_restart(tmp_path):
    clock = Clock()

    async def first():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        r = await init(b, "a")
        assert r["error_code"] == 0 and r["producer_epoch"] == 0
        pid = r["producer_id"]
        txn = b.transactions
        assert await txn.add_partitions("a", pid, 0, [("t", 0), ("t", 1)]) == 0
        assert await txn.end_txn("a", pid, 0, True) == 0
        await settle(b)
        assert markers(b, "t", 0) == [(pid, True)] and markers(b, "t", 1) == [(pid, True)]
        assert txn.describe("a")["transaction_state"] == "CompleteCommit"
        # a second id left Ongoing, a third with its PrepareAbort written but no markers
        r2 = await init(b, "b")
        assert await txn.add_partitions("b", r2["producer_id"], 0, [("t", 1)]) == 0
        r3 = await init(b, "c")
        pid3 = r3["producer_id"]
        assert await txn.add_partitions("c", pid3, 0, [("t", 0)]) == 0
        ps, _ = txn.lookup("c")
        meta = ps.txns["c"]
        transit = meta.prepare_abort_or_commit(False, clock())
        assert await txn._write(ps, meta, transit) == 0
        b.shutdown()
        return pid, r2["producer_id"], pid3

    pid, pid2, pid3 = run(first())

    async def second():
        b, ctl = make_broker(tmp_path, clock)
        txn = b.transactions
        await loaded(b)
        d = txn.describe("a")
        assert (d["transaction_state"], d["producer_id"], d["producer_epoch"]) == \
            ("CompleteCommit", pid, 0)
        d = txn.describe("b")
        assert d["transaction_state"] == "Ongoing" and d["topics"] == [
            {"topic": "t", "partitions": [1]}]
        await settle(b)       # the loaded PrepareAbort is finished by the new coordinator
        assert txn.describe("c")["transaction_state"] == "CompleteAbort"
        assert (pid3, False) in markers(b, "t", 0)
        # the Ongoing one is fenced by a new InitProducerId: abort, then a second bump
        r = await init(b, "b")
        assert r["error_code"] == E.CONCURRENT_TRANSACTIONS
        await settle(b)
        assert (pid2, False) in markers(b, "t", 1)
        r = await init(b, "b")
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, pid2, 2)
        b.shutdown()
    run(second())


def test_timeout_abort_bumps_epoch_and_fences(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        txn = b.transactions
        r = await init(b, "x", timeout_ms=1000)
        pid = r["producer_id"]
        assert await txn.add_partitions("x", pid, 0, [("t", 0)]) == 0
        clock.now += 999
        assert txn.abort_timed_out_transactions() == 0
        clock.now += 2
        assert txn.abort_timed_out_transactions() == 1
        await settle(b)
        d = txn.describe("x")
        assert (d["transaction_state"], d["producer_epoch"]) == ("CompleteAbort", 1)
        assert markers(b, "t", 0) == [(pid, False)]
        assert await txn.end_txn("x", pid, 0, True) == E.PRODUCER_FENCED
        assert await txn.add_partitions("x", pid, 0, [("t", 1)]) == E.PRODUCER_FENCED
        assert txn.verify_partitions("x", pid, 0, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}
        b.shutdown()
    run(main())


def test_transactional_id_expiration(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock, **{"transactional.id.expiration.ms": 5000})
        await setup(b, ctl)
        txn = b.transactions
        await init(b, "old")
        r = await init(b, "busy")
        assert await txn.add_partitions("busy", r["producer_id"], 0, [("t", 0)]) == 0
        clock.now += 5000
        assert txn.remove_expired_transactional_ids() == 1      # not the ongoing one
        await settle(b)
        assert txn.describe("old")["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
        assert txn.describe("busy")["transaction_state"] == "Ongoing"
        b.shutdown()
        b2, _ = make_broker(tmp_path, clock, **{"transactional.id.expiration.ms": 5000})
        await loaded(b2)
        assert b2.transactions.describe("old")["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
        assert b2.transactions.describe("busy")["transaction_state"] == "Ongoing"
        # the tombstone is in the log, with Kafka's key
        ps, _ = b2.transactions.lookup("old")
        lg = ps.partition.log
        recs = [r for bt in iter_batches(memoryview(lg.read_records_bytes(0, 1 << 20)))
                for r in bt.records()]
        assert any(r.key == rec.encode_key("old") and r.value is None for r in recs)
        b2.shutdown()
    run(main())


def test_epoch_exhaustion_rotates_producer_id(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        r = await init(b, "e")
        ps, _ = b.transactions.lookup("e")
        ps.txns["e"].producer_epoch = S.MAX_EPOCH - 1      # as if bumped 32766 times
        r2 = await init(b, "e")
        assert r2["error_code"] == 0 and r2["producer_id"] != r["producer_id"]
        assert r2["producer_epoch"] == 0
        b.shutdown()
    run(main())


def test_requests_while_loading_and_bad_input(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        txn = b.transactions
        assert (await init(b, "z"))["error_code"] == E.COORDINATOR_NOT_AVAILABLE  # no topic yet
        await setup(b, ctl)
        ps, _ = txn.lookup("z")
        ps.loading = True
        assert (await init(b, "z"))["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
        assert await txn.end_txn("z", 1, 0, True) == E.COORDINATOR_LOAD_IN_PROGRESS
        ps.loading = False
        assert (await init(b, ""))["error_code"] == E.INVALID_REQUEST
        assert (await init(b, "z", timeout_ms=-5))["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
        assert await txn.add_offsets("z", 1, 0, "") == E.INVALID_GROUP_ID
        assert await txn.end_txn("nope", 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
        listed = txn.list_transactions(["Bogus", "Empty"], [], -1)
        assert listed["unknown_state_filters"] == ["Bogus"]
        b.shutdown()
    run(main())


def test_kip360_init_with_producer_id_and_epoch(tmp_path):
    clock = Clock()

    async def init3(b, tid, pid, epoch):
        return await b.transactions.init_producer_id(
            Ctx(), {"transactional_id": tid, "transaction_timeout_ms": 60000,
                    "producer_id": pid, "producer_epoch": epoch})

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        r = await init(b, "k")
        pid = r["producer_id"]
        r = await init3(b, "k", pid, 0)                 # bump after an abortable error
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, pid, 1)
        r = await init3(b, "k", pid, 0)                 # the retry of that bump
        assert (r["error_code"], r["producer_epoch"]) == (0, 1)
        assert (await init3(b, "k", pid, 7))["error_code"] == E.PRODUCER_FENCED
        assert (await init3(b, "k", pid + 100, 1))["error_code"] == E.PRODUCER_FENCED
        b.shutdown()
    run(main())


def test_state_changes_need_the_leader_and_min_insync_replicas(tmp_path):
    """The coordinator appends as the group coordinator does (workers/coordinator_log.py):
    refused below min.insync.replicas (COORDINATOR_NOT_AVAILABLE) and when the partition
    is no longer led here (NOT_COORDINATOR), nothing written either time."""
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        txn = b.transactions
        p = b.partition("__transaction_state", txn.partition_for("a"))
        # as if the controller had made this broker the leader of replicas 1 and 2
        p.make_leader(1, p.leader_epoch + 1, [1, 2], [1], p.partition_epoch + 1, clock())
        p.min_isr = 2
        txn.became_coordinator(p)              # the new leader epoch: loaded again
        await loaded(b)
        end = p.log_end_offset
        assert (await init(b, "a"))["error_code"] == E.COORDINATOR_NOT_AVAILABLE
        assert p.log_end_offset == end

        p.make_follower(2, p.leader_epoch, [1, 2], [1, 2], p.partition_epoch + 1)
        assert (await init(b, "a"))["error_code"] == E.NOT_COORDINATOR
        assert p.log_end_offset == end
        b.shutdown()
    run(main())
