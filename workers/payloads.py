"""What crosses the mesh besides the pickled request (workers/router.py, workers/mesh.py):
record payloads, never pickled, never copied more than once.

* Produce, front -> owner: each partition's records (memoryviews over the client's
  request frame) leave as raw buffers after the pickle (`detach_records`), and arrive as
  writable memoryviews over the received frame (`attach_records`, `received_body`): the
  one copy to the owner is the kernel's.
* Fetch, owner -> front: FileSlices leave with fd=-1 as plain tuples in FileSlice's
  field order (`sanitize_response`: segment path, position, length, -1, and the
  st_dev/st_ino of the file read: a tuple pickles several times cheaper than a
  NamedTuple); the front's connection opens the file by path and sendfiles it. It
  turns them back into FileSlices and pins each to a handle of
  that very file as the answer arrives (`pin_records`, `Connection.pin`): a path that
  names another file by now (the topic deleted and created again, a compacted segment
  swapped in) never has its bytes sent for the slice; the partition is answered
  NOT_LEADER_OR_FOLLOWER instead and the client fetches again.

Pure functions over request/response dicts (unit-tested in tests/workers).
"""
from __future__ import annotations

import logging

from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from storage.slices import FileSlice

log = logging.getLogger(__name__)


def detach_records(api_key: int, body: dict) -> tuple[dict, list]:
    """A Produce body for the mesh with every partition's records replaced by the index
    of its raw buffer, and the buffers (memoryviews over the client's request frame, not
    copied): the mesh sends them raw after the pickled body (workers/mesh.py), so the
    one copy to the owner is the kernel's. Other APIs: (body, [])."""
    if api_key != api_keys.PRODUCE:
        return body, []
    bufs: list = []
    topics = []
    for t in body["topic_data"]:
        parts = []
        for p in t["partition_data"]:
            recs = p.get("records")
            if recs is not None and not isinstance(recs, int):
                parts.append({**p, "records": len(bufs)})
                bufs.append(recs)
            else:
                parts.append(p)
        topics.append({**t, "partition_data": parts})
    return {**body, "topic_data": topics}, bufs


def attach_records(body: dict, raw) -> None:
    """The owner's side of `detach_records`: buffer indexes become the (writable)
    memoryviews the mesh received, in place. An index out of range is a bad frame."""
    for t in body.get("topic_data") or ():
        for p in t.get("partition_data") or ():
            recs = p.get("records")
            if isinstance(recs, int):
                if not 0 <= recs < len(raw):
                    raise ValueError(f"records buffer {recs} of {len(raw)}")
                p["records"] = raw[recs]


def received_body(api_key: int, body: dict, raw) -> dict:
    """A forwarded request body as the owner's handler takes it: Produce records are
    writable memoryviews (`attach_records` of the raw buffers, or of records that came
    pickled), as they are over a client's request frame."""
    if api_key != api_keys.PRODUCE:
        return body
    if raw is not None:
        attach_records(body, raw)
    for t in body.get("topic_data") or ():
        for p in t.get("partition_data") or ():
            recs = p.get("records")
            if isinstance(recs, bytearray):
                p["records"] = memoryview(recs)
            elif isinstance(recs, bytes):
                p["records"] = memoryview(bytearray(recs))
    return body


def sanitize_response(api_key: int, body):
    """FileSlices leave the owner as tuples with fd=-1: fds are per process (the front
    opens by path)."""
    if api_key != api_keys.FETCH or not isinstance(body, dict):
        return body
    for t in body.get("responses") or ():
        for p in t.get("partitions") or ():
            recs = p.get("records")
            if recs and isinstance(recs, list):
                p["records"] = [(c[0], c[1], c[2], -1, c[4], c[5]) if isinstance(c, tuple)
                                else bytes(c) for c in recs]
            elif isinstance(recs, memoryview):
                p["records"] = bytes(recs)
    return body


def pin_records(data: dict, conn) -> dict:
    """The front's side of `sanitize_response`: an owner's partition answer with each
    FileSlice pinned to a handle of `conn` on the file the owner read; a slice whose
    file is gone or replaced turns the partition into NOT_LEADER_OR_FOLLOWER without
    records (retriable: the client refreshes metadata and fetches again)."""
    recs = data.get("records")
    if not recs or not isinstance(recs, list):
        return data
    pinned = []
    for c in recs:
        if isinstance(c, tuple):
            c = FileSlice._make(c)
            if conn is None:
                pinned.append(c)
                continue
            held = conn.pin(c)
            if held is None:
                log.info("fetch of %s: the segment file was deleted or replaced under the "
                         "read; answering NOT_LEADER_OR_FOLLOWER", c.path)
                return {**data, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "records": b"",
                        "high_watermark": -1, "last_stable_offset": -1,
                        "log_start_offset": -1}
            c = held
        pinned.append(c)
    return {**data, "records": pinned}
