"""DescribeLogDirs handler (workers/handlers/describe_log_dirs.py): one worker's answer
from its partitions, and the front's merge of the workers' answers."""
from __future__ import annotations

from types import SimpleNamespace

from mpbroker.protocol.errors import ErrorCode
from workers.handlers.describe_log_dirs import describe, handle, merge


def _part(topic, index, log_dir, size, hw=10, leo=10, closed=False):
    log = SimpleNamespace(dir=f"{log_dir}/{topic}-{index}", size_bytes=size,
                          high_watermark=hw, log_end_offset=leo)
    return SimpleNamespace(topic=topic, index=index, log=log, closed=closed)


def _broker(dirs, leaders=(), followers=()):
    return SimpleNamespace(config=SimpleNamespace(log_dirs=list(dirs)),
                           partitions={(p.topic, p.index): p for p in leaders},
                           followers={(p.topic, p.index): p for p in followers})


def test_describe_groups_partitions_by_dir(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    br = _broker([a, b], leaders=[_part("t", 1, a, 100), _part("t", 0, a, 50),
                                  _part("u", 0, b, 7), _part("gone", 0, a, 1, closed=True)],
                 followers=[_part("f", 0, b, 3, hw=12, leo=10)])
    resp = handle(br, None, {"topics": None})
    assert resp["error_code"] == 0
    res = {r["log_dir"]: r for r in resp["results"]}
    assert set(res) == {a, b}
    assert all(r["error_code"] == 0 and r["total_bytes"] > 0 for r in res.values())
    assert res[a]["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 0, "partition_size": 50, "offset_lag": 0, "is_future_key": False},
        {"partition_index": 1, "partition_size": 100, "offset_lag": 0, "is_future_key": False}]}]
    assert [(t["name"], t["partitions"][0]["offset_lag"]) for t in res[b]["topics"]] == \
        [("f", 2), ("u", 0)]
    # a filter names partitions; an empty list names none
    only = describe(br, {("t", 1), ("nope", 0)})
    assert [(r["log_dir"], [(t["name"], [p["partition_index"] for p in t["partitions"]])
                            for t in r["topics"]]) for r in only] == [(a, [("t", [1])]), (b, [])]
    assert all(not r["topics"] for r in handle(br, None, {"topics": []})["results"])


def test_unreadable_dir_is_a_storage_error(tmp_path):
    missing = str(tmp_path / "missing")
    [r] = describe(_broker([missing], leaders=[_part("t", 0, missing, 5)]), None)
    assert r["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR and r["topics"] == []
    assert (r["total_bytes"], r["usable_bytes"]) == (-1, -1)


def test_merge_joins_workers_per_dir():
    def res(d, topics, code=0):
        return {"error_code": code, "log_dir": d, "total_bytes": 9, "usable_bytes": 4,
                "topics": topics}

    def p(i, size):
        return {"partition_index": i, "partition_size": size, "offset_lag": 0,
                "is_future_key": False}
    w0 = {"throttle_time_ms": 0, "error_code": 0,
          "results": [res("/a", [{"name": "t", "partitions": [p(2, 20)]}]), res("/b", [])]}
    w1 = {"throttle_time_ms": 5, "error_code": 0,
          "results": [res("/a", [{"name": "s", "partitions": [p(0, 1)]},
                                 {"name": "t", "partitions": [p(0, 10)]}]),
                      res("/b", [], code=ErrorCode.KAFKA_STORAGE_ERROR)]}
    m = merge([w0, w1])
    assert m["throttle_time_ms"] == 5 and m["error_code"] == 0
    assert [r["log_dir"] for r in m["results"]] == ["/a", "/b"]
    assert m["results"][0]["topics"] == [{"name": "s", "partitions": [p(0, 1)]},
                                         {"name": "t", "partitions": [p(0, 10), p(2, 20)]}]
    assert m["results"][1]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert m["results"][1]["topics"] == []
