"""The KIP-848 server-side assignors (workers/groups/assignors.py)."""

import pytest

from workers.groups.assignors import range_assignor, uniform_assignor

T1 = b"\x01" * 16
T2 = b"\x02" * 16


@pytest.mark.parametrize("assignor", [uniform_assignor, range_assignor])
def test_assignors_balance(assignor):
    subs = {f"m{i}": {T1, T2} for i in range(3)}
    out = assignor(subs, {T1: 7, T2: 2}, {})
    sizes = sorted(len(v) for v in out.values())
    assert sum(sizes) == 9 and len(set().union(*out.values())) == 9
    if assignor is uniform_assignor:
        assert sizes == [3, 3, 3]


def test_uniform_assignor_is_sticky():
    subs = {"a": {T1}, "b": {T1}}
    first = uniform_assignor(subs, {T1: 6}, {})
    subs["c"] = {T1}
    second = uniform_assignor(subs, {T1: 6}, first)
    assert sorted(len(v) for v in second.values()) == [2, 2, 2]
    assert second["a"] <= first["a"] and second["b"] <= first["b"]
