"""DescribeLogDirs (key 35), v0-v4: this broker's log directories and, per partition,
the size of its log and its offset lag (`kafka-log-dirs.sh`, `Admin.describeLogDirs`,
`mpbroker log-dirs`).

As Kafka's ReplicaManager.describeLogDirs: one result per configured log dir
(`log.dirs`, absolute paths), including dirs that hold no partition, each with the
partitions (leaders and followers) whose log directory lies in it (a partition's dir is
the parent of its `<topic>-<partition>` directory), filtered by the request's topics
(null = every partition; an unknown one is simply absent).

* PartitionSize: the bytes of data in its segments (`Log.size_bytes`), not the length
  of the preallocated active segment file.
* OffsetLag: max(high watermark - log end offset, 0), Kafka's value for a current log.
* IsFutureKey: true for the extra entry of a replica being moved by AlterReplicaLogDirs
  (workers/handlers/alter_replica_log_dirs.py), under its target dir, with the current
  log's size and offset lag (the copy is of the whole log, paused for writes); false
  for the replica itself, listed under the dir it is served from until the swap.
* TotalBytes / UsableBytes (v4+): statvfs of the dir's volume (f_blocks / f_bavail
  times f_frsize, as Java's FileStore). A dir whose volume cannot be read answers
  KAFKA_STORAGE_ERROR with no topics.

Routing: each worker answers for the partitions it owns; the front asks every live
worker (workers/router.py `_broadcast`) and `merge` joins the answers per dir.
"""
from __future__ import annotations

import os

from mpbroker.protocol.errors import ErrorCode
from workers.handlers.alter_replica_log_dirs import future_entries


def _dir_key(path: str) -> str:
    return os.path.abspath(path)


def _volume(path: str) -> tuple[int, int, int]:
    """(error_code, total_bytes, usable_bytes) of the volume holding `path`."""
    try:
        st = os.statvfs(path)
    except OSError:
        return ErrorCode.KAFKA_STORAGE_ERROR, -1, -1
    return ErrorCode.NONE, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _wanted(req) -> set | None:
    topics = req.get("topics")
    if topics is None:
        return None
    return {(t["topic"], p) for t in topics for p in t.get("partitions") or ()}


def describe(broker, wanted: set | None) -> list[dict]:
    """The `results` of this worker: every configured dir, with its partitions."""
    dirs: dict[str, dict] = {}
    for d in broker.config.log_dirs:
        dirs.setdefault(_dir_key(d), {})
    for p in list(broker.partitions.values()) + list(broker.followers.values()):
        if p.closed or (wanted is not None and (p.topic, p.index) not in wanted):
            continue
        log = p.log
        parent = _dir_key(os.path.dirname(os.path.abspath(log.dir)))
        dirs.setdefault(parent, {}).setdefault(p.topic, []).append(
            {"partition_index": p.index, "partition_size": log.size_bytes,
             "offset_lag": max(log.high_watermark - log.log_end_offset, 0),
             "is_future_key": False})
    for target, p in future_entries(broker):
        if p.closed or (wanted is not None and (p.topic, p.index) not in wanted):
            continue
        dirs.setdefault(_dir_key(target), {}).setdefault(p.topic, []).append(
            {"partition_index": p.index, "partition_size": p.log.size_bytes,
             "offset_lag": 0,
             "is_future_key": True})
    results = []
    for path, topics in dirs.items():
        code, total, usable = _volume(path)
        results.append({
            "error_code": code, "log_dir": path, "total_bytes": total, "usable_bytes": usable,
            "topics": [] if code else [
                {"name": name, "partitions": sorted(parts, key=lambda x: x["partition_index"])}
                for name, parts in sorted(topics.items())]})
    return results


def handle(broker, ctx, req):
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "results": describe(broker, _wanted(req))}


def merge(responses: list[dict]) -> dict:
    """One answer from the workers' answers: per dir (in first-seen order) the union of
    their topics, each topic's partitions sorted; a dir's error wins over NONE."""
    dirs: dict[str, dict] = {}
    topics: dict[str, dict[str, list]] = {}
    for r in responses:
        for res in r.get("results") or ():
            path = res["log_dir"]
            cur = dirs.get(path)
            if cur is None:
                dirs[path] = cur = {k: v for k, v in res.items() if k != "topics"}
                topics[path] = {}
            elif res.get("error_code") and not cur.get("error_code"):
                cur["error_code"] = res["error_code"]
            for t in res.get("topics") or ():
                topics[path].setdefault(t["name"], []).extend(t["partitions"])
    results = []
    for path, res in dirs.items():
        res["topics"] = [] if res.get("error_code") else [
            {"name": name, "partitions": sorted(parts, key=lambda x: x["partition_index"])}
            for name, parts in sorted(topics[path].items())]
        results.append(res)
    error = next((r.get("error_code", 0) for r in responses if r.get("error_code")), 0)
    return {"throttle_time_ms": max((r.get("throttle_time_ms", 0) for r in responses), default=0),
            "error_code": error, "results": results}
