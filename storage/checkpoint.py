"""Checkpoint files: Kafka's small text format, written atomically.

Format (Kafka's `CheckpointFile`), UTF-8, '\\n' line ends:

    <version>            e.g. 0
    <entry count>        N
    <entry 1>            fields separated by one space
    ...
    <entry N>

Writes go to `<name>.tmp`, are fsynced, renamed over `<name>` and the directory is
fsynced, so a reader (or a restart after a crash) sees either the old or the new file,
never a torn one.  A file that does not parse raises `CheckpointError`; callers decide
whether that means "start from scratch" (offsets) or "rebuild" (epochs).

Files and their writer.  Kafka keeps `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint` and
`.kafka_cleanshutdown` once per *log dir*, shared by every partition in it.  mpbroker
keeps them once per *partition directory*, with the same names and the same format
(version 0, one `topic partition offset` entry):

* A partition is owned by exactly one worker process, and partitions move between
  workers (placement changes, a respawned worker).  A file shared by the partitions of
  a log dir would have several writer processes, or need a lock and a merge on every
  write; a per-partition file always has exactly one writer: the current owner.
* When a partition moves, its state moves with its directory; the new owner needs
  nothing from the old owner's files.
* The clean-shutdown marker is per partition for the same reason: one worker may stop
  cleanly while another one crashes; only the partitions of the crashed worker need
  recovery.  `Log.close(clean=True)` writes it after the last flush and checkpoint;
  `Log.open` deletes it (and fsyncs the directory) before the first append, so a
  crash after that point is always seen as unclean.

`leader-epoch-checkpoint` (see `storage/epoch_cache.py`) is per partition in Kafka too.
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class CheckpointError(ValueError):
    """A checkpoint file is malformed (never on the wire)."""


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` via tmp + fsync + rename + directory fsync (`durable`
    False: tmp + rename only, for a file of a log just created, storage/log_recovery.py)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except OSError:
        os.close(fd)
        try:
            os.unlink(tmp)          # a full disk keeps the old file, not a torn tmp
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


class CheckpointFile:
    """One checkpoint file: a version and a list of entries, each a tuple of fields.

    `parse_entry(fields: list[str]) -> entry` and `format_entry(entry) -> list[str]`
    define the entry type; both default to tuples of ints.
    """

    def __init__(self, path: str, version: int = 0,
                 parse_entry: Callable[[list[str]], object] | None = None,
                 format_entry: Callable[[object], Sequence] | None = None,
                 fields: int | None = None):
        self.path = path
        self.version = version
        self.fields = fields
        self._parse = parse_entry or (lambda f: tuple(int(x) for x in f))
        self._format = format_entry or (lambda e: [str(x) for x in e])

    def write(self, entries: Iterable) -> None:
        entries = list(entries)
        lines = [str(self.version), str(len(entries))]
        lines += [" ".join(str(f) for f in self._format(e)) for e in entries]
        atomic_write(self.path, ("\n".join(lines) + "\n").encode())

    def read(self) -> list:
        """Entries of the file; [] when it does not exist; CheckpointError when malformed."""
        try:
            with open(self.path, "rb") as f:
                text = f.read().decode("utf-8")
        except FileNotFoundError:
            return []
        except UnicodeDecodeError as e:
            raise CheckpointError(f"{self.path}: not UTF-8") from e
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        try:
            version, count = int(lines[0]), int(lines[1])
        except (IndexError, ValueError) as e:
            raise CheckpointError(f"{self.path}: bad header") from e
        if version != self.version:
            raise CheckpointError(f"{self.path}: version {version}, expected {self.version}")
        if count != len(lines) - 2 or count < 0:
            raise CheckpointError(f"{self.path}: count {count} but {len(lines) - 2} entries")
        out = []
        for line in lines[2:]:
            fields = line.split(" ")
            if self.fields is not None and len(fields) != self.fields:
                raise CheckpointError(f"{self.path}: bad entry {line!r}")
            try:
                out.append(self._parse(fields))
            except (ValueError, IndexError) as e:
                raise CheckpointError(f"{self.path}: bad entry {line!r}") from e
        return out


class OffsetCheckpoint:
    """Kafka's offset checkpoint: version 0, entries `topic partition offset`."""

    def __init__(self, path: str):
        self._file = CheckpointFile(
            path, 0, fields=3,
            parse_entry=lambda f: (f[0], int(f[1]), int(f[2])),
            format_entry=lambda e: [e[0], e[1], e[2]])
        self.path = path

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        self._file.write((t, p, o) for (t, p), o in sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self._file.read()}


class PartitionCheckpoints:
    """The per-partition checkpoint files of one partition directory (see module doc).

    `read()` returns {"recovery_point", "log_start_offset", "high_watermark"} with the
    values found (a missing or malformed file leaves its key out).  `write()` rewrites
    only the files whose value changed since the last read/write.
    """

    NAMES = {
        "recovery_point": RECOVERY_POINT_FILE,
        "log_start_offset": LOG_START_OFFSET_FILE,
        "high_watermark": HIGH_WATERMARK_FILE,
    }

    def __init__(self, dir_path: str, topic: str, partition: int):
        self.dir = dir_path
        self.topic = topic
        self.partition = partition
        self._files = {k: OffsetCheckpoint(os.path.join(dir_path, n)) for k, n in self.NAMES.items()}
        self._written: dict[str, int] = {}

    def read(self) -> dict[str, int]:
        out = {}
        for key, f in self._files.items():
            try:
                value = f.read().get((self.topic, self.partition))
            except CheckpointError:
                value = None
            if value is not None:
                out[key] = value
                self._written[key] = value
        return out

    def write(self, **values: int) -> None:
        for key, value in values.items():
            if self._written.get(key) != value:
                self._files[key].write({(self.topic, self.partition): value})
                self._written[key] = value

    # -- clean-shutdown marker --------------------------------------------------------

    @property
    def marker_path(self) -> str:
        return os.path.join(self.dir, CLEAN_SHUTDOWN_FILE)

    def had_clean_shutdown(self) -> bool:
        return os.path.exists(self.marker_path)

    def write_clean_shutdown(self) -> None:
        atomic_write(self.marker_path, b"")

    def clear_clean_shutdown(self) -> None:
        try:
            os.unlink(self.marker_path)
        except FileNotFoundError:
            return
        fsync_dir(self.dir)
