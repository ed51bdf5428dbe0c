"""workers/handlers/__init__.py, the registry: where each API runs when the broker has
several workers (the scope table the router reads)."""
from mpbroker.protocol import api_keys as K
from workers.handlers import HANDLERS, advertised_versions, fetch
from workers.router import Router
from workers.scope import GROUP, LOCAL, PARTITION, TXN

PARTITION_APIS = {K.PRODUCE, K.LIST_OFFSETS, K.DELETE_RECORDS, K.OFFSET_FOR_LEADER_EPOCH,
                  K.DESCRIBE_PRODUCERS, K.WRITE_TXN_MARKERS}
GROUP_APIS = {K.JOIN_GROUP, K.SYNC_GROUP, K.HEARTBEAT, K.LEAVE_GROUP, K.OFFSET_COMMIT,
              K.OFFSET_FETCH, K.OFFSET_DELETE, K.DESCRIBE_GROUPS, K.DELETE_GROUPS,
              K.CONSUMER_GROUP_HEARTBEAT, K.CONSUMER_GROUP_DESCRIBE, K.TXN_OFFSET_COMMIT}
TXN_APIS = {K.INIT_PRODUCER_ID, K.ADD_PARTITIONS_TO_TXN, K.ADD_OFFSETS_TO_TXN, K.END_TXN,
            K.DESCRIBE_TRANSACTIONS}
CLUSTER_APIS = {K.LIST_GROUPS, K.LIST_TRANSACTIONS, K.DESCRIBE_LOG_DIRS,
                K.ALTER_REPLICA_LOG_DIRS}


def test_scope_table():
    kinds = {key: h.scope.kind for key, h in HANDLERS.items()}
    assert {k for k, v in kinds.items() if v == "partition"} == PARTITION_APIS | {K.FETCH}
    assert {k for k, v in kinds.items() if v == "group"} == GROUP_APIS
    assert {k for k, v in kinds.items() if v == "txn"} == TXN_APIS
    assert {k for k, v in kinds.items() if v == "cluster"} == CLUSTER_APIS
    assert all(HANDLERS[k].scope is PARTITION for k in PARTITION_APIS)
    assert all(HANDLERS[k].scope is GROUP for k in GROUP_APIS)
    assert all(HANDLERS[k].scope is TXN for k in TXN_APIS)
    assert HANDLERS[K.FETCH].scope.fan_out is fetch.fan_out
    assert all(HANDLERS[k].scope.merge is not None for k in CLUSTER_APIS)
    assert HANDLERS[K.METADATA].scope is LOCAL and HANDLERS[K.API_VERSIONS].scope is LOCAL


def test_the_router_has_a_route_for_every_scope_but_local():
    kinds = {h.scope.kind for h in HANDLERS.values()} - {"local"}
    assert kinds <= set(Router(broker=None).routes)


def test_advertised_versions_are_the_registry_ranges():
    adv = {v["api_key"]: (v["min_version"], v["max_version"]) for v in advertised_versions()}
    assert adv == {k: (h.min_version, h.max_version) for k, h in HANDLERS.items()}
