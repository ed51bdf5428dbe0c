"""workers/scope.py: the scopes the registry gives and the router reads."""
from workers.scope import GROUP, LOCAL, PARTITION, TXN, cluster, cluster_by_request, partition


def test_plain_scopes_carry_no_fan_out_or_merge():
    assert [s.kind for s in (LOCAL, PARTITION, GROUP, TXN)] == \
        ["local", "partition", "group", "txn"]
    assert all(s.fan_out is None and s.merge is None for s in (LOCAL, PARTITION, GROUP, TXN))


def test_partition_with_its_own_fan_out():
    def fan_out(router, ctx, req, handle):
        return "mine"
    s = partition(fan_out)
    assert s.kind == "partition" and s.fan_out is fan_out


def test_cluster_merges_are_called_with_the_request_and_the_answers():
    assert cluster(lambda answers: sum(answers)).merge({"req": 1}, [1, 2]) == 3
    assert cluster_by_request(lambda req, answers: (req, answers)).merge("r", [1]) == ("r", [1])
