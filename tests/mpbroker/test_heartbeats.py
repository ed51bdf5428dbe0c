"""The heartbeat table (mpbroker/heartbeats.py) across a fork."""
from __future__ import annotations

import os
import time

from mpbroker.heartbeats import BOOTING, READY, HeartbeatTable


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
