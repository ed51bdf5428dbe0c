"""workers/worker.py's storage-error paths: a full disk is not a failed log dir, a
failed one goes offline while the others serve."""
from __future__ import annotations

import errno
import os

from mpbroker.metadata import model
from mpbroker.protocol.errors import ErrorCode
from storage.log import Log
from tests.workers.test_reconcile_cluster import ME, make_broker, metadata, run


def test_a_log_that_cannot_be_opened_for_want_of_space_is_opened_later(tmp_path,
                                                                       monkeypatch):
    md = metadata(("t", model.generate_topic_id(), {0: (ME, (ME,), ())}))
    real_open = Log.open
    full = {"on": True}

    def open_(*a, **kw):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(*a, **kw)
    monkeypatch.setattr(Log, "open", open_)

    async def main():
        b = make_broker(tmp_path, md)
        try:
            b.apply_metadata(md)
            assert b.partition("t", 0) is None and not b.offline_dirs
            assert b.log_dir_failed is None
            b.retry_opens()                     # still full
            assert b.partition("t", 0) is None
            full["on"] = False
            b.retry_opens()
            assert b.partition("t", 0) is not None
        finally:
            assert b.shutdown() == 0
    run(main())


def test_a_failed_dir_among_two_goes_offline_and_the_other_serves(tmp_path):
    a, c = tmp_path / "a", tmp_path / "c"
    a.mkdir()
    c.mkdir()
    tid = model.generate_topic_id()
    md = metadata(("t", tid, {i: (ME, (ME,), ()) for i in range(4)}))

    async def main():
        b = make_broker(tmp_path, md)
        b.log_dirs, b.log_dir = [str(a), str(c)], str(a)
        stops = []
        b.request_stop = lambda: stops.append(1)
        try:
            b.apply_metadata(md)
            where = {i: os.path.dirname(b.partition("t", i).log.dir) for i in range(4)}
            assert sorted(where.values()) == sorted([str(a)] * 2 + [str(c)] * 2)
            failed = [i for i in range(4) if where[i] == str(c)]
            b.fail_log_dir(str(c), OSError(errno.EIO, "Input/output error"))
            assert not stops and str(c) in b.offline_dirs
            for i in range(4):
                if i in failed:
                    assert b.partition("t", i) is None
                    assert b.partition_error("t", i) == ErrorCode.KAFKA_STORAGE_ERROR
                else:
                    assert b.partition("t", i) is not None
            b.fail_log_dir(str(a), OSError(errno.EIO, "Input/output error"))
            assert stops == [1]                 # no log dir left
        finally:
            assert b.shutdown() != 0            # offline partitions did not close cleanly
    run(main())
