"""A worker's log directories on disk (Kafka's LogManager layout): what is in them and
where a new partition goes. Pure file-system helpers; the worker (workers/worker.py)
holds the state (its dirs, the offline ones, the counts of a chunk of opens).

Layout: a partition's log is `<log dir>/<topic>-<partition>`; one being deleted is
renamed `<topic>-<partition>.<uuid>-delete` first (`delete_dir`), so that a crash
midway never leaves a half-deleted log under the partition's name; a log written in
cluster mode holds `partition.metadata` with its topic id (storage/log.py).
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from typing import Callable, Iterator

from mpbroker.metadata.model import uuid_from_str
from storage.errors import DISK_FULL_ERRNOS
from storage.log import PARTITION_METADATA_FILE

log = logging.getLogger(__name__)

# <topic>-<partition>, or <topic>-<partition>.<uuid>-delete (being deleted)
PARTITION_DIR = re.compile(r"([a-zA-Z0-9._-]+)-(\d+)(\.[0-9a-f]{32}-delete)?\Z")


def stored_topic_id(path: str) -> bytes | None:
    """The topic id in `<path>/partition.metadata` (storage/log.py's format), if any."""
    try:
        with open(os.path.join(path, PARTITION_METADATA_FILE), encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "topic_id":
                    return uuid_from_str(value.strip())
    except (OSError, ValueError):
        pass
    return None


def usable(log_dir: str) -> bool:
    """A probe of a log dir: a file can be created there (or the disk is only full)."""
    probe = os.path.join(log_dir, f".mpbroker-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError as e:
        return e.errno in DISK_FULL_ERRNOS


def delete_dir(path: str) -> None:
    """Rename to `<dir>.<uuid>-delete` first (Kafka's naming), so that a crash
    midway leaves no half-deleted log under the partition's name, then remove."""
    if not path.endswith("-delete"):
        target = f"{path}.{uuid.uuid4().hex}-delete"
        try:
            os.rename(path, target)
        except OSError as e:
            log.warning("renaming %s: %s", path, e)
            return
        path = target
    shutil.rmtree(path, ignore_errors=True)


def partitions_in(log_dir: str) -> int:
    """How many partition logs `log_dir` holds (a dir that cannot be listed: "full")."""
    try:
        return sum(1 for n in os.listdir(log_dir)
                   if (m := PARTITION_DIR.match(n)) is not None and not m.group(3))
    except OSError:
        return 1 << 62


def strays(log_dir: str, owns: Callable[[str, int], bool], hosted: set) -> Iterator[str]:
    """The directories in `log_dir` to delete: logs of partitions `owns` says are this
    worker's but that are not in `hosted` (left by a topic deleted while this broker
    was down; only logs written in cluster mode), and `-delete` directories a crash
    left behind."""
    try:
        names = os.listdir(log_dir)
    except OSError:
        return
    for name in names:
        m = PARTITION_DIR.match(name)
        if m is None:
            continue
        key = (m.group(1), int(m.group(2)))
        path = os.path.join(log_dir, name)
        if not owns(*key) or not os.path.isdir(path):
            continue
        if not m.group(3):
            if key in hosted:
                continue
            if not os.path.exists(os.path.join(path, PARTITION_METADATA_FILE)):
                continue          # not a log this broker wrote in cluster mode
            log.warning("%s: a stray log (its topic partition is not this broker's): deleting it",
                        path)
        yield path


def existing(log_dirs: list, name: str) -> tuple[str | None, tuple | None]:
    """(the path of `name` in the log dir that holds it, None) or (None, (dir, error))
    for a dir that could not tell whether it holds it, or (None, None)."""
    unknown = None
    for d in log_dirs:
        try:
            os.stat(os.path.join(d, name))
            return os.path.join(d, name), None
        except FileNotFoundError:
            continue
        except OSError as e:
            unknown = (d, e)
    return None, unknown


def least_used(healthy: list, counts: dict | None) -> str:
    """The healthy log dir with the fewest partitions, as Kafka places a new one;
    `counts` (dir -> partitions) carries the count over a chunk of opens, each dir
    listed once, and is bumped for the dir chosen."""
    if len(healthy) == 1:
        return healthy[0]
    if counts is None:
        return min(healthy, key=partitions_in)
    for d in healthy:
        if d not in counts:
            counts[d] = partitions_in(d)
    chosen = min(healthy, key=counts.__getitem__)
    counts[chosen] += 1
    return chosen
