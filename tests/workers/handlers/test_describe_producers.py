"""workers/handlers/describe_producers.py: the active producers of each partition, open
transactions and coordinator epochs included, and errors for partitions not here. Real
Partitions over real Logs, in test_txn_fetch.py's MiniBroker."""
from __future__ import annotations

from storage.batch import BatchBuilder
from tests.workers.test_txn_fetch import (  # noqa: F401 (broker: the fixture)
    TOPIC, broker, ctx, markers, produce, txn_batch)
from workers.handlers import describe_producers, write_txn_markers


def test_describe_producers_shows_open_transactions(broker):
    produce(broker, 0, txn_batch(1, 0, b"a", epoch=2))
    produce(broker, 0, BatchBuilder(producer_id=2, producer_epoch=0, base_sequence=0)
            .append(b"k", b"idempotent").build())
    produce(broker, 0, txn_batch(3, 0, b"c"))
    write_txn_markers.apply_markers(broker, markers(3, True, [0], coordinator_epoch=4))
    r = describe_producers.handle(broker, ctx(61, 0), {"topics": [
        {"name": TOPIC, "partition_indexes": [0, 1, 9]},
        {"name": "nope", "partition_indexes": [0]}]})
    p0, p1, p9 = r["topics"][0]["partitions"]
    assert p0["error_code"] == 0 and p1["error_code"] == 0 and p1["active_producers"] == []
    assert p9["error_code"] == 3 and r["topics"][1]["partitions"][0]["error_code"] == 3
    got = {a["producer_id"]: (a["producer_epoch"], a["last_sequence"], a["coordinator_epoch"],
                              a["current_txn_start_offset"]) for a in p0["active_producers"]}
    assert got == {1: (2, 0, -1, 0), 2: (0, 0, -1, -1), 3: (0, 0, 4, -1)}
