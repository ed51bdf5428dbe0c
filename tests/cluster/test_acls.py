"""ACLs in cluster mode (issue #17): an ACL created through one broker is stored as
Kafka stores it in ZooKeeper (/kafka-acl/<type>/<name>, /kafka-acl-extended/prefixed/...,
a change notification) and enforced by every broker's workers; deleting it through
another broker lifts it everywhere. The brokers talk to each other as User:ANONYMOUS
(no SASL in this suite), so allow.everyone.if.no.acl.found=true keeps the cluster's
own requests (CLUSTER_ACTION) allowed."""
from __future__ import annotations

import json

from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from mpbroker.protocol import api_keys
from tests.cluster.test_failover import create_topic
from tests.integration import broker as harness
from tests.security.acl_helpers import ANON, AUTHORIZER, add_acls, binding, request


def visible(bootstrap: str, topic: str) -> bool:
    md = request(bootstrap, api_keys.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                                  "include_cluster_authorized_operations": False,
                                                  "include_topic_authorized_operations": False})
    return topic in {t["name"] for t in md["topics"]}


def test_acl_added_through_one_broker_is_enforced_by_the_others(cluster):
    c = cluster(3, {"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true",
                    "num.workers": 2})
    create_topic(c, "secret", partitions=1, rf=3)
    create_topic(c, "public", partitions=1, rf=3)
    first, *others = list(c.brokers.values())
    add_acls(first.bootstrap, binding("TOPIC", "secret", "DESCRIBE", "DENY"),
             binding("TOPIC", "sec", "READ", pattern="PREFIXED"))
    zk = c.zk_client()
    data, _ = zk.get("/kafka-acl/Topic/secret")
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": ANON, "permissionType": "Deny", "operation": "Describe", "host": "*"}]}
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/sec")[0])["acls"][0]["operation"] == "Read"
    assert zk.get_children("/kafka-acl-changes") and zk.get_children("/kafka-acl-extended-changes")
    for b in c.brokers.values():      # every worker of every broker: several connections
        c.wait_for(lambda: all(not visible(b.bootstrap, "secret") for _ in range(4)), 10,
                   f"broker {b.bootstrap} hides the topic")
        assert visible(b.bootstrap, "public")
    f = AclBindingFilter(ResourceType.TOPIC, "secret", ResourcePatternType.LITERAL, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    a = harness.admin(others[-1].bootstrap)
    a.delete_acls([f], request_timeout=20)[f].result(20)
    assert not zk.exists("/kafka-acl/Topic/secret")
    for b in c.brokers.values():
        c.wait_for(lambda: all(visible(b.bootstrap, "secret") for _ in range(4)), 10,
                   f"broker {b.bootstrap} shows the topic again")
