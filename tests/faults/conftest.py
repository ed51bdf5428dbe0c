"""Shared helpers of the fault suite: a ledger of acknowledged records, and mounts.

* `ledger`: unique values per test; the producer's delivery reports say which were
  acknowledged (and at which offset); after everything was read back,
  `ledger.check(records)` asserts that no acknowledged record is missing or moved and
  that no value and no offset appears twice.
* `wait_until`, `produce_values`, `read_all`, `broker_log`: polling, producing ledger
  values with confluent-kafka, reading a topic back, a broker's whole log.
* `mounts`: `mounts.ext4(path, mib)` (a loop-mounted ext4 file system in an image
  file) and `mounts.tmpfs(path, mib)`; every mount is removed after the test, even
  when it failed (lazily when something still holds it open).

The tests need root (mount); CI runs as root.
"""
from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest

# the real broker per test, and its log attached to a failing test's report
from tests.integration.conftest import fresh_broker, pytest_runtest_makereport  # noqa: F401
from tests.integration.broker import wait_until  # noqa: F401  (the fault tests' polling)


class Ledger:
    def __init__(self, tag: str, pad: int = 1000):
        self.tag = tag
        self.pad = b"." * pad           # ~1 KB records: a few thousand fill a disk's slack
        self.count = 0
        self.acked: dict[bytes, tuple[int, int]] = {}    # value -> (partition, offset)
        self.failed: dict[bytes, str] = {}

    def next_value(self) -> bytes:
        self.count += 1
        return f"{self.tag}-{self.count:08d}".encode() + self.pad

    def on_delivery(self, err, msg) -> None:
        """confluent-kafka delivery callback."""
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.failed[msg.value()] = str(err)

    def check(self, records) -> dict:
        """`records`: (partition, offset, value) of everything read back.  Returns counts."""
        seen: dict[bytes, tuple[int, int]] = {}
        offsets: set[tuple[int, int]] = set()
        duplicated, moved = [], []
        for partition, offset, value in records:
            if (partition, offset) in offsets:
                raise AssertionError(f"offset {offset} of partition {partition} read twice")
            offsets.add((partition, offset))
            if value in seen:
                duplicated.append(value)
            seen[value] = (partition, offset)
        lost = [v[:40] for v in self.acked if v not in seen]
        moved = [v for v, where in self.acked.items() if v in seen and seen[v] != where]
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
        assert not moved, f"{len(moved)} acknowledged records at another offset, e.g. " \
                          f"{[(v[:40], self.acked[v], seen[v]) for v in moved[:3]]}"
        assert not duplicated, f"{len(duplicated)} records stored twice, e.g. " \
                               f"{[v[:40] for v in duplicated[:3]]}"
        return {"acked": len(self.acked), "failed": len(self.failed), "read": len(seen)}


@pytest.fixture
def ledger(request) -> Ledger:
    return Ledger(f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}")


class Mounts:
    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.mounted: list[Path] = []
        self.images: list[Path] = []
        self._images_by_path: dict[Path, Path] = {}

    def ext4(self, path: Path, mib: int) -> Path:
        image = self.scratch / f"ext4-{uuid.uuid4().hex[:8]}.img"
        with open(image, "wb") as f:
            f.truncate(mib * 1024 * 1024)
        self.images.append(image)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0",
                        str(image)], check=True, capture_output=True)
        self._images_by_path[path] = image
        return self._mount(["-o", "loop,errors=remount-ro", str(image)], path)

    def tmpfs(self, path: Path, mib: int) -> Path:
        return self._mount(["-t", "tmpfs", "-o", f"size={mib}m", "tmpfs"], path)

    def _mount(self, args: list[str], path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", *args, str(path)], check=True, capture_output=True)
        self.mounted.append(path)
        return path

    def remount_fresh(self, path: Path) -> None:
        """Unmount and mount again (a repaired ext4: the journal is replayed)."""
        image = self._images_by_path[path]
        subprocess.run(["umount", str(path)], check=True, capture_output=True)
        subprocess.run(["e2fsck", "-fy", str(image)], capture_output=True)
        subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(image), str(path)],
                       check=True, capture_output=True)

    def loop_device(self, path: Path) -> str:
        """The loop device (`loopN`) behind a mount made by `ext4`."""
        out = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(path)], check=True,
                             capture_output=True, text=True).stdout.strip()
        return os.path.basename(out)

    def cleanup(self) -> None:
        for path in reversed(self.mounted):
            if subprocess.run(["umount", str(path)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(path)], capture_output=True)
        for image in self.images:
            try:
                image.unlink()
            except OSError:
                pass


@pytest.fixture
def mounts(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the fault suite needs root (mount)")
    m = Mounts(tmp_path)
    try:
        yield m
    finally:
        m.cleanup()


def fill(path: Path) -> Path:
    """A filler file that takes every free block of `path`'s file system; remove it to
    make room again."""
    filler = path / f"filler-{uuid.uuid4().hex[:6]}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        st = os.statvfs(path)
        try:
            os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize)
        except OSError:
            pass
        pos = os.fstat(fd).st_size
        for chunk in (bytes(1 << 16), bytes(4096), bytes(512)):   # what fallocate left
            while True:
                try:
                    n = os.pwrite(fd, chunk, pos)
                except OSError:
                    break
                if n <= 0:
                    break
                pos += n
    finally:
        os.close(fd)
    return filler


# ------------------------------------------------------------ with a real broker

def produce_values(producers, ledger: Ledger, topic: str, n: int, partitions: int = 2):
    """n new ledger values per producer, round robin over the partitions (not flushed)."""
    for i in range(n):
        for p in producers:
            p.produce(topic, ledger.next_value(), partition=i % partitions,
                      on_delivery=ledger.on_delivery)
        if i % 50 == 0:
            for p in producers:
                p.poll(0)


def broker_log(b) -> str:
    return b.log_path.read_text(errors="replace")


def read_all(bootstrap: str, topic: str, partitions: int = 2) -> list:
    """(partition, offset, value) of every record up to the current end offsets."""
    from confluent_kafka import TopicPartition

    from tests.integration import broker as harness
    c = harness.consumer(bootstrap)
    try:
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
        harness.assign_from_beginning(c, topic, partitions)
        out, pos = [], [0] * partitions
        deadline = time.monotonic() + 60
        while any(pos[p] < ends[p] for p in range(partitions)) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1.0):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.value()))
                    pos[m.partition()] = m.offset() + 1
        assert all(pos[p] >= ends[p] for p in range(partitions)), \
            f"read up to {pos}, the log ends at {ends}"
        return out
    finally:
        c.close()


EXT4_IOC_SHUTDOWN = 0x8004587D          # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_DEFAULT = 0            # sync everything, then fail all I/O with EIO


def shutdown_fs(path) -> None:
    """ext4's shutdown ioctl on the file system of `path`: what was written is synced,
    then every I/O on it fails with EIO (a disk that died)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_DEFAULT))
    finally:
        os.close(fd)
