"""The ACL authorizer's semantics (Kafka's AclAuthorizer): implications, DENY over
ALLOW, LITERAL / PREFIXED / `*` resources, the `User:*` principal, hosts, super users,
allow.everyone.if.no.acl.found, and the per-connection decision cache."""
import pytest

from mpbroker.security.acl import (ALL, ALLOW, ALTER, ALTER_CONFIGS, CLUSTER, CLUSTER_ACTION,
                                   CREATE, DELETE, DENY, DESCRIBE, DESCRIBE_CONFIGS, GROUP,
                                   IDEMPOTENT_WRITE, LITERAL, PREFIXED, READ, TOPIC, WRITE,
                                   AclBinding)
from mpbroker.security.authorizer import (Authorizer, DecisionCache, is_acl_authorizer,
                                          super_users)

ALICE, BOB = "User:alice", "User:bob"


def acl(op, name="t", perm=ALLOW, principal=ALICE, host="*", rtype=TOPIC, pattern=LITERAL):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def allowed(acls, op, name="t", principal=ALICE, host="10.0.0.1", rtype=TOPIC, **kw):
    return Authorizer(acls, **kw).authorize(principal, host, op, rtype, name)


@pytest.mark.parametrize("granted, asked, expected", [
    (READ, DESCRIBE, True), (WRITE, DESCRIBE, True), (DELETE, DESCRIBE, True),
    (ALTER, DESCRIBE, True), (ALTER_CONFIGS, DESCRIBE_CONFIGS, True),
    (ALL, READ, True), (ALL, CLUSTER_ACTION, True), (ALL, DESCRIBE, True),
    (DESCRIBE, READ, False), (READ, WRITE, False), (CREATE, DESCRIBE, False),
    (DESCRIBE_CONFIGS, ALTER_CONFIGS, False), (ALTER, ALTER_CONFIGS, False),
    (WRITE, IDEMPOTENT_WRITE, False),
])
def test_implied_operations(granted, asked, expected):
    assert allowed([acl(granted)], asked) is expected


def test_deny_wins_over_allow_and_implications_do_not_deny():
    assert not allowed([acl(READ), acl(READ, perm=DENY)], READ)
    assert not allowed([acl(ALL), acl(WRITE, perm=DENY)], WRITE)
    assert allowed([acl(ALL), acl(WRITE, perm=DENY)], READ)
    assert not allowed([acl(READ), acl(ALL, perm=DENY)], READ)
    # a DENY of DESCRIBE does not deny READ (implication is for ALLOW only)
    assert allowed([acl(READ), acl(DESCRIBE, perm=DENY)], READ)
    assert not allowed([acl(READ), acl(DESCRIBE, perm=DENY)], DESCRIBE)


def test_prefixed_wildcard_resource_and_principal():
    assert allowed([acl(READ, "orders-", pattern=PREFIXED)], READ, "orders-eu")
    assert not allowed([acl(READ, "orders-", pattern=PREFIXED)], READ, "order")
    assert not allowed([acl(READ, "orders-", pattern=LITERAL)], READ, "orders-eu")
    assert allowed([acl(READ, "*")], READ, "anything")
    assert not allowed([acl(READ, "*", pattern=PREFIXED)], READ, "anything")   # a literal prefix "*"
    assert allowed([acl(READ, principal="User:*")], READ, principal=BOB)
    assert not allowed([acl(READ, "orders-", pattern=PREFIXED),
                        acl(READ, "orders-secret", perm=DENY)], READ, "orders-secret")
    assert not allowed([acl(READ), acl(READ, "*", perm=DENY, principal="User:*")], READ)


def test_hosts():
    assert allowed([acl(READ, host="10.0.0.1")], READ, host="10.0.0.1")
    assert not allowed([acl(READ, host="10.0.0.2")], READ, host="10.0.0.1")
    assert not allowed([acl(READ), acl(READ, perm=DENY, host="10.0.0.1")], READ, host="10.0.0.1")
    assert allowed([acl(READ), acl(READ, perm=DENY, host="10.0.0.9")], READ, host="10.0.0.1")


def test_other_principal_resource_type_and_operation_do_not_grant():
    acls = [acl(READ)]
    assert not allowed(acls, READ, principal=BOB)
    assert not allowed(acls, READ, rtype=GROUP)
    assert not allowed(acls, WRITE)


def test_super_users_and_allow_everyone_if_no_acl_found():
    assert allowed([acl(READ, perm=DENY)], READ, principal=BOB, super_users={BOB})
    assert not allowed([], READ)
    assert allowed([], READ, allow_if_no_acl=True)
    # an ACL on the resource (for anyone) means "found": the default no longer applies
    assert not allowed([acl(READ, principal=BOB)], READ, allow_if_no_acl=True)
    assert allowed([acl(READ, "other")], READ, allow_if_no_acl=True)
    assert allowed([acl(ALL, "kafka-cluster", rtype=CLUSTER)], CLUSTER_ACTION, "kafka-cluster",
                   rtype=CLUSTER)


def test_authorize_any_kip_679():
    az = Authorizer([acl(WRITE, "orders-", pattern=PREFIXED)])
    assert az.authorize_any(ALICE, "h", WRITE, TOPIC)
    assert not az.authorize_any(BOB, "h", WRITE, TOPIC)
    az = Authorizer([acl(WRITE), acl(WRITE, perm=DENY)])
    assert not az.authorize_any(ALICE, "h", WRITE, TOPIC)
    assert Authorizer([], allow_if_no_acl=True).authorize_any(BOB, "h", WRITE, TOPIC)


def test_class_names_and_super_users_parsing():
    assert is_acl_authorizer("kafka.security.authorizer.AclAuthorizer")
    assert is_acl_authorizer("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert not is_acl_authorizer("com.example.Other")
    assert super_users(" User:a; User:b;;") == frozenset({"User:a", "User:b"})
    assert super_users(None) == frozenset()


def test_decision_cache_is_dropped_when_the_version_changes():
    c = DecisionCache()
    assert c.get(1, "k") is None
    c.put("k", True)
    assert c.get(1, "k") is True
    assert c.get(2, "k") is None
