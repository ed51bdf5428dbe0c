"""Split/merge of the transaction APIs across coordinator workers (workers/router.py)."""
from mpbroker.protocol import api_keys as K
from workers.router import (TXN_MULTI, merge_groups, merge_list_transactions, split_groups)


def test_add_partitions_v4_split_by_transactional_id_and_merged_in_order():
    spec = TXN_MULTI[K.ADD_PARTITIONS_TO_TXN]
    req = {"transactions": [{"transactional_id": t, "producer_id": i, "producer_epoch": 0,
                             "verify_only": True, "topics": []}
                            for i, t in enumerate(["a", "b", "c", "a2"])]}
    owner = {"a": 0, "b": 1, "c": 0, "a2": 1}
    parts = split_groups(req, spec, owner.__getitem__)
    assert {w: [t["transactional_id"] for t in sub["transactions"]] for w, sub in parts.items()} \
        == {0: ["a", "c"], 1: ["b", "a2"]}
    resp = [{"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": [
                {"transactional_id": t["transactional_id"], "topic_results": []}
                for t in parts[w]["transactions"]]} for w in (1, 0)]
    merged = merge_groups(req, spec, resp)
    assert [r["transactional_id"] for r in merged["results_by_transaction"]] == ["a", "b", "c", "a2"]


def test_describe_transactions_split_plain_ids():
    spec = TXN_MULTI[K.DESCRIBE_TRANSACTIONS]
    req = {"transactional_ids": ["x", "y", "z"]}
    parts = split_groups(req, spec, lambda t: 0 if t == "y" else 2)
    assert parts == {2: {"transactional_ids": ["x", "z"]}, 0: {"transactional_ids": ["y"]}}
    merged = merge_groups(req, spec, [
        {"throttle_time_ms": 3, "transaction_states": [{"transactional_id": "x"},
                                                       {"transactional_id": "z"}]},
        {"throttle_time_ms": 5, "transaction_states": [{"transactional_id": "y"}]}])
    assert [s["transactional_id"] for s in merged["transaction_states"]] == ["x", "y", "z"]
    assert merged["throttle_time_ms"] == 5


def test_merge_list_transactions():
    out = merge_list_transactions([
        {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": ["Bogus"],
         "transaction_states": [{"transactional_id": "a"}]},
        {"throttle_time_ms": 1, "error_code": 14, "unknown_state_filters": ["Bogus"],
         "transaction_states": [{"transactional_id": "b"}]}])
    assert out == {"throttle_time_ms": 1, "error_code": 14, "unknown_state_filters": ["Bogus"],
                   "transaction_states": [{"transactional_id": "a"}, {"transactional_id": "b"}]}
