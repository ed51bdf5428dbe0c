"""ACLs with real clients (issue #17): a broker with `authorizer.class.name`, every
client connecting as User:ANONYMOUS (no SASL in this suite: tests/security/
test_acls_sasl.py has two users), so the tests turn ANONYMOUS's rights on and off.

* `open_broker`: allow.everyone.if.no.acl.found=true; the test keeps ALTER/DESCRIBE on
  the cluster for itself and adds DENY / ALLOW ACLs per resource.
* `test_default_deny_*`: allow.everyone.if.no.acl.found=false (Kafka's default); the
  ACLs are made while ANONYMOUS is a super user, then the broker restarts without
  super.users: what the prefixed ACL allows works, the rest is refused, and the ACLs
  survived the restart.
"""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AclBindingFilter, NewPartitions, NewTopic, ResourcePatternType, ResourceType, AclOperation, AclPermissionType

from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from tests.integration import broker as harness
from tests.integration.broker import Broker
from tests.security.acl_helpers import ANON, acl_broker, add_acls, binding, request

pytestmark = pytest.mark.integration


@pytest.fixture
def open_broker(tmp_path):
    b = acl_broker(tmp_path / "b", **{"allow.everyone.if.no.acl.found": "true"})
    add_acls(b.bootstrap, binding("BROKER", "kafka-cluster", "ALTER"),
             binding("BROKER", "kafka-cluster", "DESCRIBE"),
             binding("BROKER", "kafka-cluster", "CREATE"),
             binding("BROKER", "kafka-cluster", "IDEMPOTENT_WRITE"))
    yield b
    b.stop(timeout=20)


def name(prefix="t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce_error(bootstrap, topic):
    p = harness.producer(bootstrap, **{"message.timeout.ms": 10000, "enable.idempotence": False})
    errors = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    return errors[0] if errors else "no delivery report"


def test_produce_consume_allowed_and_denied_deny_wins(open_broker):
    bs = open_broker.bootstrap
    ok, denied = name("ok"), name("denied")
    harness.create_topic(bs, ok)
    harness.create_topic(bs, denied)
    add_acls(bs, binding("TOPIC", denied, "WRITE"), binding("TOPIC", denied, "WRITE", "DENY"),
             binding("TOPIC", denied, "DESCRIBE"))
    assert produce_error(bs, ok) is None
    err = produce_error(bs, denied)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # consume: READ denied on `ok` now (prefixed DENY; DESCRIBE allowed so that the
    # consumer sees the topic and fetches), the records stay unread
    add_acls(bs, binding("TOPIC", "ok-", "READ", "DENY", pattern="PREFIXED"),
             binding("TOPIC", "ok-", "DESCRIBE", pattern="PREFIXED"))
    c = harness.consumer(bs)
    c.assign([TopicPartition(ok, 0, 0)])
    msg = None
    for _ in range(40):
        msg = c.poll(0.5)
        if msg is not None:
            break
    c.close()
    assert msg is not None and msg.error() is not None
    assert msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_group_join_denied(open_broker):
    bs = open_broker.bootstrap
    t = name("g")
    harness.create_topic(bs, t)
    group = name("grp")
    add_acls(bs, binding("GROUP", group, "READ", "DENY"))
    from confluent_kafka import Consumer
    c = Consumer({**harness.common_conf(bs), "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([t])
    err = None
    for _ in range(60):
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            err = m.error()
            break
    c.close()
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_topic_create_delete_alter_and_metadata_filtering(open_broker):
    bs = open_broker.bootstrap
    a = harness.admin(bs)
    hidden, fixed, nodel = name("hidden"), name("fixed"), name("nodel")
    for t in (hidden, fixed, nodel):
        harness.create_topic(bs, t)
    # every topic open (ALL on `*`: an ACL on a topic means "found", so the
    # allow-everyone default no longer applies to it), then the DENYs win
    add_acls(bs, binding("TOPIC", "*", "ALL"), binding("TOPIC", hidden, "DESCRIBE", "DENY"),
             binding("TOPIC", fixed, "ALTER", "DENY"), binding("TOPIC", nodel, "DELETE", "DENY"),
             binding("TOPIC", "nocreate-", "CREATE", "DENY", pattern="PREFIXED"),
             binding("BROKER", "kafka-cluster", "CREATE", "DENY"))
    listed = a.list_topics(timeout=10).topics
    assert hidden not in listed and fixed in listed
    md = a.list_topics(hidden, timeout=10).topics[hidden]
    assert md.error is not None and md.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        a.create_partitions([NewPartitions(fixed, 3)])[fixed].result(20)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        a.delete_topics([nodel], operation_timeout=20)[nodel].result(20)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    bad, good = name("nocreate"), name("create")
    futs = a.create_topics([NewTopic(bad, 1, 1), NewTopic(good, 1, 1)], operation_timeout=20)
    futs[good].result(20)
    with pytest.raises(KafkaException) as e:
        futs[bad].result(20)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    a.delete_topics([good], operation_timeout=20)[good].result(20)


def test_describe_and_delete_acls(open_broker):
    bs = open_broker.bootstrap
    a = harness.admin(bs)
    t = name("acl")
    add_acls(bs, binding("TOPIC", t, "READ"), binding("TOPIC", t + "-", "WRITE", pattern="PREFIXED"))
    f = AclBindingFilter(ResourceType.TOPIC, t, ResourcePatternType.MATCH, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    found = a.describe_acls(f, request_timeout=20).result(20)
    assert {(b.name, b.operation) for b in found} == {(t, AclOperation.READ)}
    f_any = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, ANON, None,
                             AclOperation.WRITE, AclPermissionType.ANY)
    deleted = a.delete_acls([f_any], request_timeout=20)[f_any].result(20)
    assert [(b.name, b.resource_pattern_type) for b in deleted] == [(t + "-", ResourcePatternType.PREFIXED)]
    assert a.describe_acls(f_any, request_timeout=20).result(20) == []
    # invalid requests (hand-made: the client library refuses to send them) change nothing
    bad = {"resource_type_filter": 0, "resource_name_filter": None, "pattern_type_filter": 1,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    r = request(bs, api_keys.DESCRIBE_ACLS, 1, bad)
    assert r["error_code"] == ErrorCode.INVALID_REQUEST, r
    r = request(bs, api_keys.DELETE_ACLS, 1, {"filters": [bad]})
    assert r["filter_results"][0]["error_code"] == ErrorCode.INVALID_REQUEST
    r = request(bs, api_keys.CREATE_ACLS, 1, {"creations": [
        {"resource_type": 4, "resource_name": "other", "resource_pattern_type": 3,
         "principal": ANON, "host": "*", "operation": 3, "permission_type": 3},
        {"resource_type": 2, "resource_name": t, "resource_pattern_type": 2,
         "principal": ANON, "host": "*", "operation": 3, "permission_type": 3}]})
    assert [x["error_message"] for x in r["results"]] == [
        "The only valid name for the CLUSTER resource is kafka-cluster", "Invalid patternType 2"]
    assert {b.name for b in a.describe_acls(f, request_timeout=20).result(20)} == {t}


@pytest.mark.parametrize("api, version, body", [
    (api_keys.LEADER_AND_ISR, 5, {"controller_id": 1, "controller_epoch": 99, "broker_epoch": -1,
                                  "type": 0, "topic_states": [], "live_leaders": []}),
    (api_keys.CONTROLLED_SHUTDOWN, 3, {"broker_id": 1, "broker_epoch": -1}),
    (api_keys.WRITE_TXN_MARKERS, 1, {"markers": [{"producer_id": 5, "producer_epoch": 0,
                                                  "transaction_result": True,
                                                  "topics": [{"name": "t", "partition_indexes": [0]}],
                                                  "coordinator_epoch": 1000}]}),
    (api_keys.FETCH, 11, {"replica_id": 2, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                          "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                          "topics": [{"topic": "__consumer_offsets", "partitions": [
                              {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                               "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                          "forgotten_topics_data": [], "rack_id": ""}),
])
@pytest.mark.parametrize("authorizer", [False, True])
def test_inter_broker_apis_from_a_client_are_refused_on_a_lone_broker(tmp_path, api, version, body,
                                                                      authorizer):
    """Beyond Kafka: with no other brokers, nobody may send these, authorizer or not."""
    over = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": ANON} if authorizer else {}
    b = Broker(tmp_path / "b", over, name="lone").start()
    try:
        resp = request(b.bootstrap, api, version, body)
        codes = set(_codes(resp))
        assert codes == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}, resp
    finally:
        b.stop(timeout=20)


def _codes(x):
    if isinstance(x, dict):
        for k, v in x.items():
            if k in ("error_code", "partition_error_code") or (k == "error_code"):
                yield v
            else:
                yield from _codes(v)
    elif isinstance(x, list):
        for v in x:
            yield from _codes(v)


def test_default_deny_prefixed_acl_and_acls_survive_a_restart(tmp_path):
    b = acl_broker(tmp_path / "b", **{"super.users": ANON})
    bs = b.bootstrap
    mine, other = name("app-orders"), name("other")
    harness.create_topic(bs, mine)
    harness.create_topic(bs, other)
    add_acls(bs, binding("TOPIC", "app-", "ALL", pattern="PREFIXED"),
             binding("GROUP", "app-", "READ", pattern="PREFIXED"))
    b.stop(timeout=20)
    b.overrides.pop("super.users")
    b.start()
    try:
        listed = harness.admin(bs).list_topics(timeout=10).topics
        assert mine in listed and other not in listed
        assert produce_error(bs, mine) is None
        err = produce_error(bs, other)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # no ALTER on the cluster: the ACL APIs are refused
        with pytest.raises(KafkaException) as e:
            add_acls(bs, binding("TOPIC", other, "READ"))
        assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        # the consumer group under the prefixed group ACL reads what it may
        from confluent_kafka import Consumer
        c = Consumer({**harness.common_conf(bs), "group.id": name("app-g"),
                      "auto.offset.reset": "earliest"})
        c.subscribe([mine])
        got = harness.consume(c, 1)
        c.close()
        assert got[0].value() == b"v"
    finally:
        b.stop(timeout=20)
