"""MarkerSender (workers/txn/markers.py) in one real worker (as test_service.py): markers
for this worker's partitions written in process, unknown partitions answered, and the
per-partition codes read from a WriteTxnMarkers response."""
from __future__ import annotations

from mpbroker.protocol.errors import ErrorCode
from workers.txn.markers import _collect

from tests.workers.txn.test_service import Clock, init, make_broker, markers, run, setup


def test_collect_reads_every_partition_and_fills_the_missing():
    out = {}
    _collect({"markers": [{"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 6}]}]}]},
        out, [("t", 0), ("t", 1), ("t", 2)])
    assert out == {("t", 0): 0, ("t", 1): 6, ("t", 2): ErrorCode.UNKNOWN_SERVER_ERROR}


def test_local_markers_are_written_and_unknown_partitions_answered(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        r = await init(b, "a")
        pid = r["producer_id"]
        assert await b.transactions.add_partitions("a", pid, 0, [("t", 0)]) == 0
        codes = await b.transactions.markers.write(pid, 0, True, 0, [("t", 0), ("nope", 0)])
        assert codes == {("t", 0): 0, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert markers(b, "t", 0) == [(pid, True)]
        b.shutdown()
    run(main())
