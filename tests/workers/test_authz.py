"""The front check (workers/authz.py) on decoded requests, with a stand-in broker:
whole refusals, per-topic filtering merged back into the response, Metadata listing,
the lone broker's refusal of inter-broker APIs, and the decision cache."""
from types import SimpleNamespace

from mpbroker.metadata.model import ClusterMetadata, set_acls
from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.acl import (ALLOW, CLUSTER, CREATE, DENY, DESCRIBE, GROUP, LITERAL, PREFIXED,
                                   READ, TOPIC, TRANSACTIONAL_ID, WRITE, AclBinding)
from workers.authz import front_check

ME = "User:ANONYMOUS"
AZ = "kafka.security.authorizer.AclAuthorizer"


def broker(acls=(), **cfg):
    md = set_acls(ClusterMetadata("c"), acls)
    config = {"authorizer.class.name": AZ, "super.users": "", "allow.everyone.if.no.acl.found": False,
              "zookeeper.connect": "zk:2181", "auto.create.topics.enable": True, **cfg}
    return SimpleNamespace(config=config, metadata=md)


def ctx(api, version):
    return SimpleNamespace(api_key=api, api_version=version, client_host="127.0.0.1",
                           connection=SimpleNamespace(), principal=ME)


def allow(rtype, name, op, pattern=LITERAL, perm=ALLOW):
    return AclBinding(rtype, name, pattern, ME, "*", op, perm)


def produce(*topics):
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
            "topic_data": [{"name": t, "partition_data": [{"index": 0, "records": None}]} for t in topics]}


def test_no_authorizer_checks_nothing_but_a_lone_broker_refuses_inter_broker_apis():
    b = broker(**{"authorizer.class.name": ""})
    assert front_check(b, ctx(api_keys.PRODUCE, 9), produce("t")) is None
    lone = broker(**{"authorizer.class.name": "", "zookeeper.connect": None})
    v = front_check(lone, ctx(api_keys.CONTROLLED_SHUTDOWN, 3), {"broker_id": 1, "broker_epoch": 0})
    assert v.refused and v.answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    fetch = {"replica_id": 2, "topics": [], "max_wait_ms": 0}
    assert front_check(lone, ctx(api_keys.FETCH, 11), fetch).refused
    assert front_check(lone, ctx(api_keys.FETCH, 11), {**fetch, "replica_id": -1}) is None


def test_produce_is_filtered_per_topic_and_the_denied_topics_answered():
    b = broker([allow(TOPIC, "app-", WRITE, PREFIXED), allow(TOPIC, "app-secret", WRITE, perm=DENY)])
    v = front_check(b, ctx(api_keys.PRODUCE, 9), produce("app-a", "other", "app-secret"))
    assert [t["name"] for t in v.request["topic_data"]] == ["app-a"]
    body = v.finish({"responses": [{"name": "app-a", "partition_responses": [
        {"index": 0, "error_code": 0}]}], "throttle_time_ms": 0})
    codes = {t["name"]: t["partition_responses"][0]["error_code"] for t in body["responses"]}
    assert codes == {"app-a": 0, "other": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     "app-secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    # every topic denied: answered at once, nothing runs
    v = front_check(b, ctx(api_keys.PRODUCE, 9), produce("other"))
    assert v.refused and v.answer["responses"][0]["partition_responses"][0]["error_code"] == 29
    assert front_check(b, ctx(api_keys.PRODUCE, 9), produce("app-a")) is None


def test_group_apis_need_read_on_the_group():
    b = broker([allow(GROUP, "g", READ)])
    join = {"group_id": "g", "session_timeout_ms": 1, "member_id": "", "protocol_type": "consumer",
            "protocols": []}
    assert front_check(b, ctx(api_keys.JOIN_GROUP, 5), join) is None
    v = front_check(b, ctx(api_keys.JOIN_GROUP, 5), {**join, "group_id": "h"})
    assert v.answer["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_metadata_lists_only_describable_topics_and_auto_creation_needs_create():
    b = broker([allow(TOPIC, "a", DESCRIBE), allow(TOPIC, "new", READ)])
    v = front_check(b, ctx(api_keys.METADATA, 9), {"topics": None, "allow_auto_topic_creation": True})
    body = v.finish({"brokers": [], "topics": [{"name": "a"}, {"name": "b"}]})
    assert [t["name"] for t in body["topics"]] == ["a"]
    v = front_check(b, ctx(api_keys.METADATA, 9), {"topics": [{"name": "b"}, {"name": "new"}],
                                                   "allow_auto_topic_creation": True})
    assert v.request["topics"] == []        # "new" does not exist: CREATE missing
    body = v.finish({"brokers": [], "topics": []})
    assert {t["name"]: t["error_code"] for t in body["topics"]} == {"b": 29, "new": 29}


def test_cluster_apis_and_the_cache_follows_the_acl_version():
    b = broker([allow(CLUSTER, "kafka-cluster", CREATE)])
    c = ctx(api_keys.DESCRIBE_LOG_DIRS, 3)
    req = {"topics": None}
    assert front_check(b, c, req).answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert c.connection.acl_asker.cache.decisions      # cached on the connection
    b.metadata = set_acls(b.metadata, [allow(CLUSTER, "kafka-cluster", DESCRIBE)])
    assert front_check(b, c, req) is None
    b.metadata = set_acls(b.metadata, [])
    assert front_check(b, c, req).refused
    b.config["super.users"] = ME
    b.config = dict(b.config)                     # a new config: a new authorizer
    assert front_check(b, c, req) is None


def test_transactions_need_write_on_the_transactional_id_and_verification_cluster_action():
    b = broker([allow(TRANSACTIONAL_ID, "tx-", WRITE, PREFIXED)])
    end = {"transactional_id": "tx-1", "producer_id": 1, "producer_epoch": 0, "committed": True}
    assert front_check(b, ctx(api_keys.END_TXN, 3), end) is None
    v = front_check(b, ctx(api_keys.END_TXN, 3), {**end, "transactional_id": "other"})
    assert v.answer["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    verify = {"transactions": [{"transactional_id": "tx-1", "producer_id": 1, "producer_epoch": 0,
                                "verify_only": True, "topics": []}]}
    v = front_check(b, ctx(api_keys.ADD_PARTITIONS_TO_TXN, 4), verify)
    assert v.refused and v.answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # InitProducerId without a transactional id: KIP-679, WRITE on any topic suffices
    v = front_check(b, ctx(api_keys.INIT_PRODUCER_ID, 4), {"transactional_id": None,
                                                          "transaction_timeout_ms": 1,
                                                          "producer_id": -1, "producer_epoch": -1})
    assert v.answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    b = broker([allow(TOPIC, "t", WRITE)])
    assert front_check(b, ctx(api_keys.INIT_PRODUCER_ID, 4), {"transactional_id": None,
                                                             "transaction_timeout_ms": 1,
                                                             "producer_id": -1,
                                                             "producer_epoch": -1}) is None


def test_a_lone_broker_told_so_serves_inter_broker_apis():
    lone = broker(**{"authorizer.class.name": "", "zookeeper.connect": None,
                     "lone.broker.inter.broker.requests.enable": True})
    assert front_check(lone, ctx(api_keys.WRITE_TXN_MARKERS, 1), {"markers": []}) is None


def test_offset_fetch_needs_describe_on_each_topic():
    b = broker([allow(GROUP, "g", READ), allow(TOPIC, "a", READ)])
    req = {"groups": [{"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0]},
                                                   {"name": "b", "partition_indexes": [0, 1]}]}],
           "require_stable": False}
    v = front_check(b, ctx(api_keys.OFFSET_FETCH, 8), req)
    assert [t["name"] for t in v.request["groups"][0]["topics"]] == ["a"]
    body = v.finish({"groups": [{"group_id": "g", "error_code": 0, "topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "error_code": 0}]}]}]})
    got = {t["name"]: [p["error_code"] for p in t["partitions"]] for t in body["groups"][0]["topics"]}
    assert got == {"a": [0], "b": [29, 29]}
    every = {"groups": [{"group_id": "g", "topics": None}], "require_stable": False}
    body = front_check(b, ctx(api_keys.OFFSET_FETCH, 8), every).finish(
        {"groups": [{"group_id": "g", "error_code": 0, "topics": [{"name": "a", "partitions": []},
                                                                  {"name": "b", "partitions": []}]}]})
    assert [t["name"] for t in body["groups"][0]["topics"]] == ["a"]
    v = front_check(b, ctx(api_keys.OFFSET_FETCH, 7), {"group_id": "g", "topics": [
        {"name": "b", "partition_indexes": [0]}], "require_stable": False})
    assert v.answer["topics"][0]["partitions"][0]["error_code"] == 29 and v.answer["error_code"] == 0
