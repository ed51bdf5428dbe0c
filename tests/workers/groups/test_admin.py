"""DeleteGroups / OffsetDelete / ListGroups / DescribeGroups (workers/groups/admin.py)."""

from workers.groups import errors
from workers.groups import records as rec

from .harness import Box, commit, fetch, form_group, join, make, protocols


def test_delete_groups():
    coord, _, sched, app = make()
    commit(coord, "simple", {("t", 0): 1})
    form_group(coord, sched, 1, group="busy")
    res = coord.delete_groups(["simple", "busy", "nope"], 2)
    assert res == [{"group_id": "simple", "error_code": 0},
                   {"group_id": "busy", "error_code": errors.NON_EMPTY_GROUP},
                   {"group_id": "nope", "error_code": errors.GROUP_ID_NOT_FOUND}]
    assert "simple" not in coord.groups
    assert app.log()[-1] == (rec.encode_offset_commit_key("simple", "t", 0), None)
    assert fetch(coord, "simple", [("t", 0)])[1][("t", 0)][0] == -1


def test_offset_delete():
    coord, _, sched, app = make()
    (a,), gen = form_group(coord, sched, 1, topics=("t",))
    commit(coord, "g", {("t", 0): 1, ("u", 0): 2}, generation=gen, member_id=a)
    box = Box()
    coord.offset_delete({"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]},
        {"name": "u", "partitions": [{"partition_index": 0}]}]}, 0, box)
    assert box.value == {"error_code": 0, "throttle_time_ms": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": errors.GROUP_SUBSCRIBED_TO_TOPIC}]},
        {"name": "u", "partitions": [{"partition_index": 0, "error_code": 0}]}]}
    assert set(coord.groups["g"].offsets) == {("t", 0)}
    box = Box()
    coord.offset_delete({"group_id": "nope", "topics": []}, 0, box)
    assert box.value["error_code"] == errors.GROUP_ID_NOT_FOUND


def test_list_groups_with_filters():
    coord, _, sched, _ = make()
    commit(coord, "simple", {("t", 0): 1})
    form_group(coord, sched, 1, group="live")
    err, groups = coord.list_groups()
    assert err == 0
    assert {(g["group_id"], g["group_state"], g["protocol_type"]) for g in groups} == {
        ("simple", "Empty", ""), ("live", "Stable", "consumer")}
    assert [g["group_id"] for g in coord.list_groups(["stable"])[1]] == ["live"]
    assert coord.list_groups(None, ["consumer"]) == (0, [])
    assert len(coord.list_groups(None, ["Classic"])[1]) == 2


def test_describe_groups():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    [d] = coord.describe_groups(["g"], 5)
    assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer" and d["protocol_data"] == "range"
    assert {m["member_id"] for m in d["members"]} == {a, b}
    assert all(m["member_metadata"] and m["member_assignment"] for m in d["members"])
    assert d["members"][0]["client_host"] == "/127.0.0.1" and d["authorized_operations"] == -2147483648
    [d0] = coord.describe_groups(["g"], 0)
    assert "authorized_operations" not in d0 and "group_instance_id" not in d0["members"][0]
    join(coord, member_id=a, protos=protocols("x"))
    [d] = coord.describe_groups(["g"], 5)
    assert d["group_state"] == "PreparingRebalance" and d["protocol_data"] == ""
    assert all(m["member_metadata"] == b"" for m in d["members"])
    [missing] = coord.describe_groups(["zz"], 5)
    assert missing["group_state"] == "Dead" and missing["error_code"] == 0
