"""The heartbeat table (mpbroker/heartbeats.py) across a fork."""
from __future__ import annotations

import os
import time

from mpbroker.heartbeats import BOOTING, READY, SLOT, HeartbeatTable


def test_heartbeat_table_is_shared_with_a_forked_child():
    table = HeartbeatTable(2)
    table.reset(1)
    assert table.read(1)[1] == BOOTING
    before = time.monotonic()
    pid = os.fork()
    if pid == 0:
        table.beat(1)
        os._exit(0)
    os.waitpid(pid, 0)
    got_pid, state, last = table.read(1)
    assert (got_pid, state) == (pid, READY)
    assert before <= last <= time.monotonic()         # the child's beat, on the shared clock


def test_fresh_means_serving_and_beaten_lately():
    table = HeartbeatTable(2)
    table.reset(1)
    assert not table.fresh(1, 10.0)                    # booting
    table.beat(1)
    assert table.fresh(1, 10.0)
    SLOT.pack_into(table.map, SLOT.size, os.getpid(), READY, time.monotonic() - 5)
    assert not table.fresh(1, 2.0) and table.fresh(1, 10.0)   # beat 5 s ago
