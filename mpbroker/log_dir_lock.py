"""Claiming the log directories for one broker process: each is made usable, then locked.

Before the supervisor forks anything, `claim_log_dirs` checks every directory of
`log.dirs` (created when missing, as Kafka's LogManager does; it must then be a
writable directory) and takes an exclusive `flock` on `<dir>/.lock` (Kafka's lock
file name), writing the supervisor's pid into it so that a second broker can name the
holder. The lock belongs to the open file description, which the forked controller and
workers inherit: a child closing its copy releases nothing, and the lock is released
only when the last process holding the description exits, so data cannot be claimed
by a second broker while any process of the first one still runs. Nothing ever
unlocks explicitly (`LOCK_UN` in a child would release it for the whole tree); the
kernel releases it on exit, however the process ends (SIGKILL included).

Errors are `LogDirError` with one line for the operator; `mpbroker serve` exits 2.
With several log dirs, one that cannot be used (not a writable directory, an I/O error
on its lock file: a failed disk) is left out as Kafka's LogManager puts it offline: the
broker starts on the others (its workers find that dir failed and answer
KAFKA_STORAGE_ERROR for its partitions, workers/worker.py); only a dir locked by another
broker, or no usable dir at all, stops the start.
"""
from __future__ import annotations

import errno
import fcntl
import os
from typing import Callable, List, Optional, Sequence

LOCK_FILE = ".lock"


class LogDirError(Exception):
    """A log dir that cannot be used or is held by another broker (`held`; one line)."""

    def __init__(self, message: str, held: bool = False):
        super().__init__(message)
        self.held = held


def check_usable(path: str) -> None:
    """Create `path` if missing; it must then be a directory this process can write."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise LogDirError(f"log dir {path} is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise LogDirError(f"log dir {path} cannot be created: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise LogDirError(f"log dir {path} is not writable")


def _holder(fd: int) -> str:
    try:
        data = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        data = ""
    return data if data.isdigit() else "unknown"


def lock_dir(path: str, pid: int | None = None) -> int:
    """Lock `<path>/.lock`; returns the descriptor, to be kept open for the broker's life."""
    lock_path = os.path.join(path, LOCK_FILE)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise LogDirError(f"log dir {path}: cannot open {LOCK_FILE}: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _holder(fd)
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LogDirError(f"log dir {path} is locked by another mpbroker process "
                              f"(pid {holder})", held=True) from None
        raise LogDirError(f"log dir {path}: cannot lock {LOCK_FILE}: {e.strerror or e}") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid() if pid is None else pid}\n".encode(), 0)
    except OSError as e:
        os.close(fd)
        raise LogDirError(f"log dir {path}: cannot write {LOCK_FILE}: {e.strerror or e}") from None
    return fd


class LogDirLocks:
    """The held locks (descriptors) of every log dir; `release` is for tests and the
    end of `serve`: the kernel releases them on exit anyway."""

    def __init__(self, fds: List[int]):
        self.fds = fds

    def release(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def claim_log_dirs(dirs: Sequence[str],
                   on_offline: Optional[Callable[[LogDirError], None]] = None) -> LogDirLocks:
    """Check and lock every dir, in order. A dir held by another broker raises
    LogDirError, and so does the first unusable dir when no dir is usable; with other
    dirs usable an unusable one is left out (`on_offline(error)`: the caller logs it).
    On an error the locks taken are released."""
    fds: List[int] = []
    offline: List[LogDirError] = []
    try:
        for d in dirs:
            try:
                check_usable(d)
                fds.append(lock_dir(d))
            except LogDirError as e:
                if e.held:
                    raise
                offline.append(e)
        if offline and not fds:
            raise offline[0]
    except LogDirError:
        LogDirLocks(fds).release()
        raise
    for e in offline:
        if on_offline is not None:
            on_offline(e)
    return LogDirLocks(fds)
