"""Recovery after kill -9 on a small tmpfs: the index files (sparse, 10 MiB each while
their segment is active) are counted without touching their holes, so recovery needs
no RAM/tmpfs space for them (it died of SIGBUS before: ~20 MiB per partition)."""
from __future__ import annotations

import pytest

from tests.faults.conftest import broker_log, produce_values, read_all
from tests.integration import broker as harness

pytestmark = pytest.mark.slow


def test_recovery_on_small_tmpfs_after_kill9(fresh_broker, mounts, ledger, tmp_path):
    data = tmp_path / "broker0" / "data"
    mounts.tmpfs(data, 24)                   # 4 partitions x 2 x 10 MiB of index holes
    b = fresh_broker()
    topic = harness.create_topic(b.bootstrap, "crash", 4)
    p = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True})
    produce_values((p,), ledger, topic, 400, partitions=4)
    harness.flush(p, 60)
    assert len(ledger.acked) == 400
    b.kill()                                 # kill -9 of the whole broker
    b.start()
    assert "recovered 0 logs" not in broker_log(b).split("===== start #2")[1]
    counts = ledger.check(read_all(b.bootstrap, topic, partitions=4))
    assert counts["acked"] == 400 and counts["read"] == 400
    assert "SIGBUS" not in broker_log(b) and "signal 7" not in broker_log(b)
    assert b.stop() == 0
