"""The transaction coordinator's background load (workers/txn/service.py
`_load_and_resume`) in one real worker, as test_service.py: the partition is replayed
in chunks with the loop free in between (COORDINATOR_LOAD_IN_PROGRESS meanwhile), a
failed load is retried instead of serving part of the state, and a partition lost
during its load stops it."""
from __future__ import annotations

import asyncio

from mpbroker.protocol.errors import ErrorCode as E
from storage import errors as serr
from workers import coordinator_log
from workers.txn import config as txn_config

from tests.workers.txn.test_service import Clock, init, loaded, make_broker, run, setup

IDS = [f"tx-{i}" for i in range(40)]


async def written(tmp_path, clock):
    """A broker whose __transaction_state holds an InitProducerId record per id; shut down."""
    b, ctl = make_broker(tmp_path, clock)
    await setup(b, ctl)
    pids = {}
    for tid in IDS:
        r = await init(b, tid)
        assert r["error_code"] == 0
        pids[tid] = r["producer_id"]
    b.shutdown()
    return pids


def described(txn):
    return {tid: (d["error_code"], d["producer_id"], d["transaction_state"])
            for tid in IDS for d in [txn.describe(tid)]}


def test_load_in_chunks_answers_load_in_progress_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr(txn_config, "LOAD_BUFFER_BYTES", 256)
    clock = Clock()

    async def main():
        pids = await written(tmp_path, clock)
        b, _ = make_broker(tmp_path, clock)
        txn = b.transactions
        steps = 0
        while any(ps.loading for ps in txn.states.values()):
            loading = {ps.index for ps in txn.states.values() if ps.loading}
            for tid in IDS:
                if txn.partition_for(tid) in loading:
                    assert txn.describe(tid)["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
                    assert (await init(b, tid))["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
            await asyncio.sleep(0)
            steps += 1
        assert steps >= 4                          # several chunks, the loop free between
        assert described(txn) == {tid: (0, pids[tid], "Empty") for tid in IDS}
        b.shutdown()
    run(main())


def test_failed_load_is_retried_not_served_half_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(txn_config, "LOAD_BUFFER_BYTES", 256)
    monkeypatch.setattr(coordinator_log, "LOAD_RETRY_MIN_MS", 20)
    clock = Clock()

    async def main():
        pids = await written(tmp_path, clock)
        b, _ = make_broker(tmp_path, clock)
        txn = b.transactions
        ps = txn.states[txn.partition_for(IDS[0])]
        lg = ps.partition.log
        real, calls = lg.read_records_bytes, []

        def flaky(offset, max_bytes):
            calls.append(offset)
            if len(calls) == 2:
                raise serr.KafkaStorageError("injected read failure")
            return real(offset, max_bytes)
        lg.read_records_bytes = flaky
        while len(calls) < 2:
            await asyncio.sleep(0)
        await asyncio.sleep(0)      # a turn: the loader took the failure, waits out its backoff
        assert ps.loading and txn.describe(IDS[0])["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
        await loaded(b)
        assert calls.count(calls[0]) == 2          # started over from the log start
        assert described(txn) == {tid: (0, pids[tid], "Empty") for tid in IDS}
        b.shutdown()
    run(main())


def test_partition_lost_during_load_stops_it(tmp_path, monkeypatch):
    monkeypatch.setattr(txn_config, "LOAD_BUFFER_BYTES", 256)
    clock = Clock()

    async def main():
        await written(tmp_path, clock)
        b, _ = make_broker(tmp_path, clock)
        txn = b.transactions
        ps = txn.states[txn.partition_for(IDS[0])]
        await asyncio.sleep(0)
        txn.resigned_coordinator(ps.partition)
        await asyncio.sleep(0)
        assert ps.load_task.cancelled() and not ps.txns
        assert txn.describe(IDS[0])["error_code"] == E.NOT_COORDINATOR
        b.shutdown()
    run(main())
