"""A little disk space held back so that metadata can still be written on a full disk.

File `<dir>/.mpbroker-space-reserve` (`RESERVE_BYTES`, blocks allocated with
`posix_fallocate`), created by `ensure(dir)` while there is room.  `write(dir, fn)`
runs `fn` (a small atomic metadata write: tmp + fsync + rename); when it fails with
ENOSPC/EDQUOT the reserve is removed and `fn` runs once more, now with room for it.
This is what lets DeleteTopics (a metadata write) and a restart (the placement table,
mpbroker/controller/placement.py) go through on a full disk and free the
space of the deleted logs; `ensure` puts the reserve back once there is room for it
twice over.  Owner: whichever process writes the metadata in `dir` (the controller);
no other process touches the file.
"""
from __future__ import annotations

import os
from typing import Callable, TypeVar

from storage.errors import DISK_FULL_ERRNOS

RESERVE_FILE = ".mpbroker-space-reserve"
RESERVE_BYTES = 4 * 1024 * 1024      # many metadata writes of the sizes seen here

T = TypeVar("T")


def ensure(dir_path: str, size: int = RESERVE_BYTES) -> bool:
    """Create the reserve when it is missing and there is room for it and as much again
    (right after a release on a full disk there is not: the freed space is for the
    metadata writes until something frees more); True when it exists."""
    path = os.path.join(dir_path, RESERVE_FILE)
    try:
        if os.path.getsize(path) >= size:
            return True
    except OSError:
        pass
    try:
        st = os.statvfs(dir_path)
        if st.f_bavail * st.f_frsize < 2 * size:
            return False
    except OSError:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, size)
        return True
    except OSError:
        os.close(fd)
        fd = -1
        try:
            os.unlink(path)             # no half reserve: it would hide the free space
        except OSError:
            pass
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def release(dir_path: str) -> bool:
    """Free the reserve; True when there was one."""
    try:
        os.unlink(os.path.join(dir_path, RESERVE_FILE))
        return True
    except OSError:
        return False


def write(dir_path: str, fn: Callable[[], T]) -> T:
    """`fn()`; on a full disk, once more after freeing the reserve (see the docstring)."""
    try:
        result = fn()
    except OSError as e:
        if e.errno not in DISK_FULL_ERRNOS or not release(dir_path):
            raise
        result = fn()
    ensure(dir_path)
    return result
