"""File slices: the unit in which record data leaves storage.

A read from a log never copies record bytes into Python objects: it returns
`FileSlice`s, byte ranges of segment files, which the connection that answers the
Fetch sends with `sendfile(2)` straight from the page cache. In the multiprocess
runtime the owner of a partition hands the slices to the front worker, which opens
the file by `path` (the `fd` is only valid inside the owning process).

`dev`/`ino` are the `st_dev`/`st_ino` of the file the owner read, taken while the owner
held it open (so no other existing file had that identity at the time): a path can name
another file later (a topic deleted and created again, a compacted segment swapped in
at the same name), so whoever sends a slice through an fd of its own checks that the
fd's file has this identity (workers/connection.py). (0, 0): unknown, not checked.
"""
from typing import NamedTuple


class FileSlice(NamedTuple):
    path: str
    position: int
    length: int
    fd: int = -1
    dev: int = 0
    ino: int = 0
