"""AlterReplicaLogDirs (key 34), v0-v2: move replicas between the log dirs of this
broker (KIP-113; `kafka-reassign-partitions.sh` with `log_dirs`, `Admin.alterReplicaLogDirs`,
`mpbroker log-dirs move`).

Answers per partition as Kafka's ReplicaManager.alterReplicaLogDirs:

* LOG_DIR_NOT_FOUND: the path is not one of `log.dirs` (compared as absolute paths);
* KAFKA_STORAGE_ERROR: the target dir is offline (failed), or the replica is in one;
* UNKNOWN_TOPIC_OR_PARTITION: the metadata has no such partition;
* REPLICA_NOT_AVAILABLE: the partition exists but this broker hosts no replica of it
  (Kafka keeps this code for NotLeaderOrFollower here), or its owning worker is gone;
* NONE: the move started (or the replica already is in that dir). It runs in the
  background; DescribeLogDirs shows the replica under its new dir once it is done and,
  meanwhile, a `is_future_key` entry under the target dir.

Routing: every worker gets the whole request (workers/router.py, like DescribeLogDirs);
each answers for the partitions it owns by placement and `merge` keeps those answers.

The move (`move_replica`, a task on the owning worker's loop; a simpler scheme than
Kafka's future log that is caught up by a fetcher while the replica keeps serving):

1. Writes to the replica pause (`Partition.moving`: produce, markers, follower
   appends and DeleteRecords answer NOT_LEADER_OR_FOLLOWER, which clients retry; a
   follower stops fetching; housekeeping and compaction leave it alone); reads go on.
   The log is flushed, its producer state snapshotted at the log end, its checkpoints
   written.
2. Every file of `<src>/<topic>-<p>` is copied into `<target>/<topic>-<p>.<uuid>-future`
   in 1 MiB chunks (holes of preallocated files skipped), the loop let in between
   chunks; each file is fsynced, then a `.mpbroker-move-complete` marker and the dir.
3. The swap, with no await in between: if the log changed meanwhile (its start, end,
   segments or leader epochs: a truncation or an epoch change that writes are not
   paused for) the copy starts over. Else `<src>/<topic>-<p>` is renamed
   `<topic>-<p>.<uuid>-delete` (the commit point), the future dir renamed
   `<target>/<topic>-<p>`, both parents fsynced, and the log opened from there
   (recovery of the active segment, as after a crash, since the copy has no
   clean-shutdown marker); the high watermark is carried over. The old log is closed
   and its dir removed the topic's `file.delete.delay.ms` later (slices already handed out stay
   valid). A failed open renames both back and keeps the old log.

Crashes: a `-future` dir without the marker is an unfinished copy, removed at start
(`recover_moves`, run by the supervisor before it forks anything); one with the
marker is promoted only when no dir holds `<topic>-<p>` (the commit point was
passed), else removed; `-delete` dirs are removed. A worker respawned mid-swap finds
no `<topic>-<p>` and promotes the future dir itself (`complete_future`, from
Worker.partition_dir).

A second request for a replica that is moving retargets the running move (it starts
over towards the new dir; the replica's own dir cancels it). A copy that fails (the
target full, an I/O error) is logged and abandoned: the replica stays where it was.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import shutil
import uuid

from mpbroker.protocol.errors import ErrorCode
from storage.checkpoint import fsync_dir
from storage.log import Log

log = logging.getLogger(__name__)

CHUNK = 1 << 20
COMPLETE_MARKER = ".mpbroker-move-complete"
FUTURE_DIR = re.compile(r"([a-zA-Z0-9._-]+-\d+)\.([0-9a-f]{32})-future\Z")
DELETE_DIR = re.compile(r"[a-zA-Z0-9._-]+-\d+\.[0-9a-f]{32}-delete\Z")
SKIP_SUFFIXES = (".deleted", ".cleaned", ".tmp")
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"


# ------------------------------------------------------------------ request handling
def _abs(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def _wanted(req) -> dict[tuple[str, int], str]:
    """(topic, partition) -> target path; a partition named twice: the last one."""
    out: dict[tuple[str, int], str] = {}
    for d in req.get("dirs") or ():
        for t in d.get("topics") or ():
            for p in t.get("partitions") or ():
                out[(t["name"], p)] = d["path"]
    return out


def _hosted(broker, key):
    return broker.partitions.get(key) or broker.followers.get(key)


def alter_one(broker, topic: str, index: int, path: str) -> int:
    dirs = {_abs(d): d for d in broker.log_dirs}
    target = dirs.get(_abs(path)) if os.path.isabs(path) else None
    if target is None:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if target in broker.offline_dirs:
        return ErrorCode.KAFKA_STORAGE_ERROR
    md = broker.metadata
    t = md.topics.get(topic) if md is not None else None
    if t is None or index not in t.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if (topic, index) in broker.offline_partitions:
        return ErrorCode.KAFKA_STORAGE_ERROR
    p = _hosted(broker, (topic, index))
    if p is None or p.closed:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    start_move(broker, p, target)
    return ErrorCode.NONE


def handle(broker, ctx, req):
    results: dict[str, list] = {}
    for (topic, index), path in _wanted(req).items():
        mine = broker.owns(topic, index)
        code = alter_one(broker, topic, index, path) if mine else ErrorCode.REPLICA_NOT_AVAILABLE
        results.setdefault(topic, []).append(
            {"partition_index": index, "error_code": code, "owned": mine})
    out = {"throttle_time_ms": 0,
           "results": [{"topic_name": t, "partitions": ps} for t, ps in results.items()]}
    router = broker.router
    if router is None or not router.active:
        return merge(req, [out])        # the one worker: no router merges it
    return out


def merge(req, responses: list[dict]) -> dict:
    """Per partition, the answer of the worker that owns it; else an error answer of a
    worker whose handler failed (no `owned` flag: error_response); else
    REPLICA_NOT_AVAILABLE (its owner is gone, or it is between workers)."""
    found: dict[tuple[str, int], int] = {}
    failed: dict[tuple[str, int], int] = {}
    for r in responses:
        for t in r.get("results") or ():
            for p in t["partitions"]:
                key = (t["topic_name"], p["partition_index"])
                owned = p.get("owned")
                if owned:
                    found[key] = p["error_code"]
                elif owned is None:
                    failed.setdefault(key, p["error_code"])
    for key, code in failed.items():
        found.setdefault(key, code)
    results: dict[str, list] = {}
    for key in _wanted(req):
        results.setdefault(key[0], []).append(
            {"partition_index": key[1],
             "error_code": found.get(key, ErrorCode.REPLICA_NOT_AVAILABLE)})
    return {"throttle_time_ms": max((r.get("throttle_time_ms", 0) for r in responses), default=0),
            "results": [{"topic_name": t, "partitions": ps} for t, ps in results.items()]}


# ------------------------------------------------------------------ the move
def _moves(broker) -> dict:
    m = getattr(broker, "log_dir_moves", None)
    if m is None:
        m = broker.log_dir_moves = {}      # (topic, p) -> LogDirMove
    return m


class LogDirMove:
    """A replica's move in progress: `target` may change (a newer request)."""

    def __init__(self, target: str):
        self.target = target
        self.future_dir: str | None = None     # where the copy is being written
        self.task: asyncio.Task | None = None
        self.done = asyncio.get_running_loop().create_future()


def start_move(broker, p, target: str) -> LogDirMove | None:
    moves = _moves(broker)
    m = moves.get(p.key)
    if m is not None:
        m.target = target                      # the running task follows it
        return m
    if os.path.dirname(p.log.dir) == target:
        return None
    m = moves[p.key] = LogDirMove(target)
    p.moving = True                            # writes pause from now on
    if broker.followers.get(p.key) is p:
        broker.replication.unfollow(p.key)     # fetching again once it is done
    m.task = asyncio.get_running_loop().create_task(_run(broker, p, m))
    return m


def future_entries(broker) -> list[tuple[str, object]]:
    """(target dir, partition) of the moves in progress (DescribeLogDirs' future keys)."""
    return [(m.target, _hosted(broker, key)) for key, m in _moves(broker).items()
            if m.future_dir is not None and _hosted(broker, key) is not None]


async def _run(broker, p, m: LogDirMove) -> None:
    key = p.key
    try:
        while not _gone(broker, p) and os.path.dirname(p.log.dir) != m.target:
            await _move_once(broker, p, m)
            if m.future_dir is not None:        # abandoned (retargeted, log changed)
                shutil.rmtree(m.future_dir, ignore_errors=True)
                m.future_dir = None
    except Exception as e:
        log.error("moving %s-%d to %s failed: %s", p.topic, p.index, m.target, e)
    finally:
        if m.future_dir is not None:
            shutil.rmtree(m.future_dir, ignore_errors=True)
            m.future_dir = None
        p.moving = False
        _moves(broker).pop(key, None)
        if not _gone(broker, p) and broker.followers.get(key) is p:
            broker.replication.follow(p)
        for purgatory in (broker.fetch_purgatory, broker.produce_purgatory,
                          broker.delete_records_purgatory):
            purgatory.check_and_complete(key)
        if not m.done.done():
            m.done.set_result(None)


def _gone(broker, p) -> bool:
    return p.closed or _hosted(broker, p.key) is not p


def _fingerprint(lg):
    return (lg.log_start_offset, lg.log_end_offset, tuple(s.base_offset for s in lg.segments),
            tuple((e.epoch, e.start_offset) for e in lg.epoch_cache.entries))


async def _move_once(broker, p, m: LogDirMove) -> None:
    lg = p.log
    target = m.target
    name = os.path.basename(lg.dir)
    lg.flush()
    lg.producer_state.take_snapshot(lg.next_offset)
    lg.checkpoint()
    before = _fingerprint(lg)
    future = os.path.join(target, f"{name}.{uuid.uuid4().hex}-future")
    m.future_dir = future
    os.makedirs(future)
    for fname in sorted(os.listdir(lg.dir)):
        if fname == CLEAN_SHUTDOWN or fname.endswith(SKIP_SUFFIXES):
            continue
        src = os.path.join(lg.dir, fname)
        if not os.path.isfile(src):
            continue
        try:
            await copy_file(src, os.path.join(future, fname))
        except FileNotFoundError:
            pass                    # removed meanwhile: the fingerprint check decides
        if _gone(broker, p) or m.target != target:
            return                  # the finally of _run removes the copy
    write_marker(future)
    if _gone(broker, p) or m.target != target or p.log is not lg:
        return
    if _fingerprint(lg) != before:
        log.info("%s changed during its move to %s: copying again", name, target)
        return
    swap(broker, p, future)
    m.future_dir = None


async def copy_file(src: str, dst: str) -> None:
    """Copies `src` in CHUNK pieces (holes and all-zero chunks left as holes: the
    preallocated tails of active segments and indexes), letting the loop in between."""
    fin = os.open(src, os.O_RDONLY)
    try:
        size = os.fstat(fin).st_size
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pos = 0
            while pos < size:
                try:
                    pos = os.lseek(fin, pos, os.SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:
                        break       # only a hole past pos
                    # no SEEK_DATA on this file system: read everything
                n = min(CHUNK, size - pos)
                chunk = os.pread(fin, n, pos)
                if not chunk:
                    break
                if chunk.count(0) != len(chunk):
                    os.pwrite(fout, chunk, pos)
                pos += len(chunk)
                await asyncio.sleep(0)
            os.ftruncate(fout, size)
            os.fsync(fout)
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def write_marker(path: str) -> None:
    fd = os.open(os.path.join(path, COMPLETE_MARKER), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path)


def swap(broker, p, future: str) -> None:
    """The commit (synchronous): old dir -> `-delete`, future -> the partition's name,
    the log reopened from there. On a failure both are renamed back."""
    old = p.log
    src = old.dir
    name = os.path.basename(src)
    final = os.path.join(os.path.dirname(future), name)
    trash = f"{src}.{uuid.uuid4().hex}-delete"
    os.rename(src, trash)
    try:
        fsync_dir(os.path.dirname(src))
        os.rename(future, final)
        fsync_dir(os.path.dirname(final))
        os.unlink(os.path.join(final, COMPLETE_MARKER))
        new = Log.open(final, old.config, clock=broker.clock, topic_id=p.topic_id)
    except Exception:
        if os.path.isdir(final):
            os.rename(final, future)
        os.rename(trash, src)
        raise
    if new.high_watermark != old.high_watermark and old.high_watermark <= new.log_end_offset:
        new.update_high_watermark(old.high_watermark)
    p.log = new
    cleaners = getattr(broker, "cleaners", None)
    if cleaners is not None:
        cleaners.forget(p.key)
    log.info("moved %s to %s (log end %d)", name, os.path.dirname(final), new.log_end_offset)

    def retire():
        try:
            old.close(clean=False)
        except Exception:
            pass
        shutil.rmtree(trash, ignore_errors=True)
    delay_s = max(0, old.config.file_delete_delay_ms) / 1000
    try:
        asyncio.get_running_loop().call_later(delay_s, retire)
    except RuntimeError:
        retire()


# ------------------------------------------------------------------ crash recovery
def complete_future(log_dirs, name: str) -> str | None:
    """A worker opening `name` (`<topic>-<p>`) found it in no log dir: a completed
    `-future` copy of it (a move that passed its commit point) becomes the partition's
    dir. Returns that path, or None."""
    for d in log_dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            fm = FUTURE_DIR.match(n)
            if fm is None or fm.group(1) != name:
                continue
            path = os.path.join(d, n)
            if os.path.exists(os.path.join(path, COMPLETE_MARKER)):
                final = os.path.join(d, name)
                os.rename(path, final)
                os.unlink(os.path.join(final, COMPLETE_MARKER))
                fsync_dir(d)
                log.warning("%s: completed the interrupted move into %s", name, d)
                return final
    return None


def recover_moves(log_dirs) -> None:
    """At start, before any worker runs: finish or undo the moves a crash interrupted
    (see the module doc), then remove `-delete` dirs."""
    dirs = []
    for d in log_dirs:
        try:
            dirs.append((d, os.listdir(d)))
        except OSError:
            continue
    present = {n for _, names in dirs for n in names}
    for d, names in dirs:
        for n in names:
            fm = FUTURE_DIR.match(n)
            if fm is None:
                continue
            path = os.path.join(d, n)
            if fm.group(1) not in present and \
                    os.path.exists(os.path.join(path, COMPLETE_MARKER)):
                complete_future([d], fm.group(1))
                present.add(fm.group(1))
            else:
                log.warning("%s: removing an unfinished log dir move", path)
                shutil.rmtree(path, ignore_errors=True)
    for d, names in dirs:
        for n in names:
            if DELETE_DIR.match(n):
                shutil.rmtree(os.path.join(d, n), ignore_errors=True)
