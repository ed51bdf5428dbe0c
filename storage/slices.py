"""File slices: the unit in which record data leaves storage.

A read from a log never copies record bytes into Python objects: it returns
`FileSlice`s, byte ranges of segment files, which the connection that answers the
Fetch sends with `sendfile(2)` straight from the page cache. In the multiprocess
runtime the owner of a partition hands the slices to the front worker, which opens
the file by `path` (the `fd` is only valid inside the owning process).
"""
from typing import NamedTuple


class FileSlice(NamedTuple):
    path: str
    position: int
    length: int
    fd: int = -1

