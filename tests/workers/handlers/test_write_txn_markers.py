"""workers/handlers/write_txn_markers.py: `apply_markers` answers per marker and partition
(old producer epochs, fenced coordinators, unknown partitions), for any input. Real
Partitions over real Logs, in test_txn_fetch.py's MiniBroker."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workers.test_txn_fetch import (  # noqa: F401 (broker: the fixture)
    TOPIC, MiniBroker, broker, ctx, markers, produce, txn_batch)
from workers.handlers import write_txn_markers


def test_apply_markers_errors_per_partition(broker):
    produce(broker, 0, txn_batch(1, 0, b"x", epoch=2))
    res = write_txn_markers.apply_markers(broker, [
        *markers(1, True, [0], epoch=1),                       # old producer epoch
        *markers(1, True, [0, 1, 7], epoch=2, coordinator_epoch=3),
        *markers(1, False, [1], epoch=2, coordinator_epoch=2),  # fenced coordinator
        *markers(-1, True, [0]),                               # no producer id
        {"producer_id": 1, "producer_epoch": 2, "transaction_result": True,
         "topics": [{"name": "nope", "partition_indexes": [0]}], "coordinator_epoch": 3},
    ])
    codes = [[p["error_code"] for t in m["topics"] for p in t["partitions"]] for m in res]
    assert codes == [[47], [0, 0, 3], [52], [49], [3]]
    assert broker.partition(TOPIC, 0).last_stable_offset == 2
    r = write_txn_markers.handle(broker, ctx(27, 1), {"markers": []})
    assert r == {"markers": []}


@given(st.lists(st.fixed_dictionaries({
    "producer_id": st.integers(-2, 3), "producer_epoch": st.integers(-2, 3),
    "transaction_result": st.booleans(), "coordinator_epoch": st.integers(-3, 3),
    "topics": st.lists(st.fixed_dictionaries({
        "name": st.sampled_from([TOPIC, "other", ""]),
        "partition_indexes": st.lists(st.integers(-1, 3), max_size=3)}), max_size=2)}),
    max_size=4))
@settings(max_examples=60, deadline=None)
def test_apply_markers_any_input_answers_per_partition(tmp_path_factory, markers_in):
    b = MiniBroker(tmp_path_factory.mktemp("fuzz"))
    try:
        for pid in range(3):
            produce(b, 0, txn_batch(pid, 0, b"x"))
        out = write_txn_markers.apply_markers(b, markers_in)
        assert len(out) == len(markers_in)
        allowed = {0, 3, 6, 47, 49, 52}
        for m_in, m_out in zip(markers_in, out):
            assert m_out["producer_id"] == m_in["producer_id"]
            got = [p["partition_index"] for t in m_out["topics"] for p in t["partitions"]]
            assert got == [i for t in m_in["topics"] for i in t["partition_indexes"]]
            assert {p["error_code"] for t in m_out["topics"] for p in t["partitions"]} <= allowed
        for p in b.partitions.values():
            p.log._check_invariants()
            assert p.last_stable_offset <= p.high_watermark
    finally:
        b.close()
