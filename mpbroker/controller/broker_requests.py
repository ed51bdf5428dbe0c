"""The partitions named in a controller -> broker request (LeaderAndIsr 4, StopReplica 5,
UpdateMetadata 6; any version), StopReplica's delete flags, and the response body for
per-partition errors. Pure."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

ZERO_UUID = bytes(16)
NAMES = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata"}


def partitions(api_key: int, version: int, body: dict) -> List[Tuple[str, int, Optional[bytes]]]:
    """[(topic, partition, topic id or None)] in request order."""
    if api_key == 5:
        if version >= 3:
            return [(t["topic_name"], s["partition_index"], None)
                    for t in body.get("topic_states") or [] for s in t["partition_states"]]
        if version >= 1:
            return [(t["name"], p, None) for t in body.get("topics") or [] for p in t["partition_indexes"]]
        return [(x["topic_name"], x["partition_index"], None) for x in body.get("ungrouped_partitions") or []]
    if version >= (2 if api_key == 4 else 5):
        return [(t["topic_name"], s["partition_index"], t.get("topic_id"))
                for t in body.get("topic_states") or [] for s in t["partition_states"]]
    return [(s["topic_name"], s["partition_index"], None)
            for s in body.get("ungrouped_partition_states") or []]


def stop_deletes(version: int, body: dict) -> Dict[Tuple[str, int], bool]:
    """StopReplica: {(topic, partition): delete the log?} (one flag per request before v3)."""
    if version >= 3:
        return {(t["topic_name"], s["partition_index"]): bool(s["delete_partition"])
                for t in body.get("topic_states") or [] for s in t["partition_states"]}
    delete = bool(body.get("delete_partitions"))
    return {(t, p): delete for t, p, _ in partitions(5, version, body)}


def response(api_key: int, version: int, parts, errors: Dict[Tuple[str, int], int], err: int) -> dict:
    if api_key == 6:
        return {"error_code": err}
    if api_key == 4 and version >= 5:
        by_id: Dict[bytes, list] = {}
        for t, p, tid in parts:
            by_id.setdefault(tid or ZERO_UUID, []).append(
                {"partition_index": p, "error_code": errors.get((t, p), err)})
        return {"error_code": err, "topics": [{"topic_id": tid, "partition_errors": pe}
                                              for tid, pe in by_id.items()]}
    return {"error_code": err, "partition_errors": [
        {"topic_name": t, "partition_index": p, "error_code": errors.get((t, p), err)}
        for t, p, _ in parts]}
