"""Stateful property test of transactions in the log against a model.

Operations: transactional appends of three producers, plain appends, COMMIT/ABORT
markers (`append_control`), rolls, follower-style truncation to a batch boundary,
clean and unclean reopen (recovery rebuilds the txnindex and the open transactions),
compaction passes and clock jumps past `delete.retention.ms`.  Every key is unique, so
compaction may only drop aborted data and spent markers: the committed view must not
change.
After every step: the LSO, each producer's open transaction, and what a read_committed
consumer sees (records below the LSO minus the aborted transactions, found with
`collect_aborted_transactions` and the markers, as clients do) match the model.
"""
from __future__ import annotations

import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from storage.batch import BatchBuilder
from storage.cleaner import LogCleaner
from storage.log import Log, LogConfig
from tests.storage.test_txn import committed_view

PIDS = (1, 2, 3)


class Clock:
    now = 1_700_000_000_000

    def __call__(self):
        return self.now


def config():
    return LogConfig(segment_bytes=500, index_interval_bytes=64, segment_index_bytes=8 * 6,
                     file_delete_delay_ms=0, cleanup_policy="compact",
                     min_cleanable_dirty_ratio=0.0, delete_retention_ms=1000)


class TxnMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.dir = self.tmp + "/txn-0"
        self.clock = Clock()
        self.log = Log.open(self.dir, config(), self.clock)
        # events in offset order: ("data", pid | None, first, last, [values]) /
        # ("marker", pid, offset, commit)
        self.events: list[tuple] = []
        self.counter = 0
        self.compacted_at = 0        # log end at the last compaction pass

    def teardown(self):
        if not self.log.closed:
            self.log.close(clean=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- model ----------------------------------------------------------------------

    def _model(self):
        """(committed [(offset, value)], open {pid: first offset}, LSO)."""
        open_txn: dict[int, int] = {}
        pending: dict[int, list] = {}
        visible: list = []
        for ev in self.events:
            if ev[0] == "data":
                _, pid, first, last, values = ev
                recs = list(zip(range(first, last + 1), values))
                if pid is None:
                    visible.extend(recs)
                else:
                    open_txn.setdefault(pid, first)
                    pending.setdefault(pid, []).extend(recs)
            else:
                _, pid, offset, commit = ev
                if pid in open_txn:
                    if commit:
                        visible.extend(pending[pid])
                    del open_txn[pid]
                    pending[pid] = []
        end = self.log.log_end_offset
        lso = min(open_txn.values(), default=end)
        return sorted(r for r in visible if r[0] < lso), open_txn, lso

    def _seq(self, pid):
        return sum(len(ev[4]) for ev in self.events if ev[0] == "data" and ev[1] == pid)

    def _hw(self):
        self.log.update_high_watermark(self.log.log_end_offset)

    # -- operations -------------------------------------------------------------------

    @rule(pid=st.sampled_from(PIDS + (None,)), n=st.integers(1, 3), size=st.integers(0, 60))
    def append(self, pid, n, size):
        values = []
        for _ in range(n):
            self.counter += 1
            values.append(b"v%d-" % self.counter + b"x" * size)
        if pid is None:
            b = BatchBuilder(clock=self.clock)
        else:
            b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=self._seq(pid),
                             is_transactional=True, clock=self.clock)
        for v in values:
            b.append(v[:v.index(b"-")], v)     # unique key per record
        info = self.log.append(b.build(), 0)
        self._hw()
        self.events.append(("data", pid, info.first_offset, info.last_offset, values))

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans())
    def marker(self, pid, commit):
        info = self.log.append_control(pid, 0, commit, 0, 0)
        self._hw()
        self.events.append(("marker", pid, info.first_offset, commit))

    @rule()
    def roll(self):
        self.log.roll()

    @rule(back=st.integers(1, 4))
    def truncate(self, back):
        if len(self.events) < back:
            return
        ev = self.events[-back]
        offset = ev[2]
        if offset < self.compacted_at:
            # the cleaner removed aborted data on the word of markers below the high
            # watermark (= log end here), and committed data is never truncated
            return
        self.log.truncate_to(offset)
        del self.events[-back:]
        self._hw()
        assert self.log.log_end_offset == offset

    @rule()
    def compact(self):
        cleaner = LogCleaner(self.log)
        cleaner.clean_all()
        self.compacted_at = self.log.log_end_offset

    @rule(ms=st.sampled_from([10, 2000]))
    def tick(self, ms):
        self.clock.now += ms

    @rule(clean=st.booleans())
    def reopen(self, clean):
        self.log.close(clean=clean)
        self.log = Log.open(self.dir, config(), self.clock)
        self._hw()

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def matches_model(self):
        committed, open_txn, lso = self._model()
        log = self.log
        assert log.last_stable_offset == lso
        assert {p: log.has_ongoing_txn(p) for p in PIDS} == {p: p in open_txn for p in PIDS}
        assert log.producer_state.ongoing_txns == {f: p for p, f in open_txn.items()}
        assert [(o, v) for o, _, v in committed_view(log)] == committed
        entries = [t.last_offset for s in log.segments for t in s.txn_index.entries]
        assert entries == sorted(entries)


TestTxnMachine = TxnMachine.TestCase
TestTxnMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
