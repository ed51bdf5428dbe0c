"""A failing log dir (one dir): EIO (ext4's shutdown ioctl) or a read-only file
system (ext4 errors=remount-ro, triggered through /sys/fs/ext4/<dev>/trigger_fs_error).

The broker logs the failed log dir and stops by itself with a non-zero exit code
(Kafka halts when no log dir is left); nothing acknowledged before is lost: after
the file system is repaired (mounted again) the broker starts and serves it all.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct

import pytest

from tests.faults.test_disk_full import _log, _produce, _read_all, _wait
from tests.integration import broker as harness

pytestmark = pytest.mark.slow

EXT4_IOC_SHUTDOWN = 0x8004587D          # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_DEFAULT = 0            # sync everything, then fail all I/O with EIO


def _shutdown_fs(path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_DEFAULT))
    finally:
        os.close(fd)


@pytest.mark.parametrize("fault", ["eio", "read-only"])
def test_failed_log_dir_stops_the_broker_non_zero(fresh_broker, mounts, ledger, tmp_path,
                                                  fault):
    data = tmp_path / "broker0" / "data"
    mounts.ext4(data, 32)
    b = fresh_broker()
    topic = harness.create_topic(b.bootstrap, "failing", 2)
    p = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True,
                                                       "message.timeout.ms": 20000})
    _produce((p,), ledger, topic, 200)
    harness.flush(p, 60)
    acked = dict(ledger.acked)
    assert len(acked) == 200
    # the acknowledged records are on disk (what a disk failure cannot take back:
    # records still only in the page cache die with the file system, in Kafka too)
    os.sync()
    if fault == "eio":
        _shutdown_fs(data)
    else:
        _make_read_only(mounts, data)

    def stopped():
        _produce((p,), ledger, topic, 10)
        p.poll(0.2)
        return not b.is_alive()
    _wait(stopped, 60, "stopped by itself")
    assert b.proc.returncode != 0
    text = _log(b)
    assert "failed" in text and "no log dir left: stopping the broker" in text, text[-3000:]
    b.kill()
    p.purge()                   # what was never acknowledged is not sent to the next start
    p.flush(5)

    # repaired: mounted again, the broker starts and has every acknowledged record
    mounts.remount_fresh(data)
    b.start()
    counts = ledger.check(_read_all(b.bootstrap, topic))
    assert counts["acked"] >= 200
    assert b.stop() == 0


def _make_read_only(mounts, data) -> None:
    """An ext4 error with errors=remount-ro: every write fails with EROFS from now on."""
    dev = mounts.loop_device(data)
    with open(f"/sys/fs/ext4/{dev}/trigger_fs_error", "w") as f:
        f.write("test: fail the log dir\n")

    def read_only():
        try:
            os.close(os.open(data / "probe", os.O_WRONLY | os.O_CREAT, 0o644))
            return False
        except OSError as e:
            return e.errno == errno.EROFS
    _wait(read_only, 10, "read-only")


def test_unclean_close_makes_sigterm_exit_non_zero(fresh_broker, mounts, tmp_path):
    """SIGTERM's exit code says whether the clean shutdown succeeded: the partitions
    cannot be closed cleanly on a read-only file system."""
    data = tmp_path / "broker0" / "data"
    mounts.ext4(data, 32)
    b = fresh_broker()
    harness.create_topic(b.bootstrap, "closing", 2)
    _make_read_only(mounts, data)
    assert b.stop() != 0
    assert "did not close cleanly" in _log(b)
