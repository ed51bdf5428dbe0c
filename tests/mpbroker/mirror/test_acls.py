"""Topic ACL sync: the mapping (which source bindings, mapped how) as a pure function,
and AclSync against fake AdminClients: created on the target, a cluster without an
authorizer reported once and skipped, never raised."""
from __future__ import annotations

import logging

from confluent_kafka import KafkaError
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from mpbroker.mirror.acls import AclSync, target_bindings
from mpbroker.mirror.config import MirrorConfig
from tests.mpbroker.mirror.test_topics import done


def acl(name, op, perm="ALLOW", principal="User:alice", host="*", pattern="LITERAL",
        rtype="TOPIC") -> AclBinding:
    return AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principal, host,
                      AclOperation[op], AclPermissionType[perm])


def flow(**props):
    return MirrorConfig.from_props({"clusters": "A, B", "A.bootstrap.servers": "a:1",
                                    "B.bootstrap.servers": "b:1", "A->B.enabled": "true",
                                    **props}).flows[0]


def remote(t):
    return f"A.{t}"


def test_allow_write_dropped_allow_all_read_others_copied_for_the_remote_topic():
    source = [acl("orders", "READ"), acl("orders", "WRITE"), acl("orders", "ALL", host="10.0.0.1"),
              acl("orders", "DESCRIBE", principal="User:bob"),
              acl("orders", "WRITE", perm="DENY", principal="User:eve"),
              acl("orders", "ALL", perm="DENY", principal="User:eve")]
    assert target_bindings(source, lambda t: True, remote) == [
        acl("A.orders", "READ"), acl("A.orders", "READ", host="10.0.0.1"),
        acl("A.orders", "DESCRIBE", principal="User:bob"),
        acl("A.orders", "WRITE", perm="DENY", principal="User:eve"),
        acl("A.orders", "ALL", perm="DENY", principal="User:eve")]


def test_only_literal_names_of_replicated_topics_and_no_repeats():
    source = [acl("orders", "READ"), acl("orders", "ALL"),          # both READ at the target
              acl("other", "READ"), acl("ord", "READ", pattern="PREFIXED"),
              acl("app", "READ", rtype="GROUP")]
    assert target_bindings(source, lambda t: t == "orders", remote) == [acl("A.orders", "READ")]
    assert target_bindings([], lambda t: True, remote) == []


class FakeAdmin:
    def __init__(self, acls=(), error=None):
        self.acls = list(acls)
        self.error = error
        self.calls = []

    def describe_acls(self, f, **kw):
        self.calls.append("describe")
        return done(error=self.error) if self.error else done(list(self.acls))

    def create_acls(self, bindings, **kw):
        self.calls.append("create")
        if self.error:
            return {b: done(error=self.error) for b in bindings}
        self.acls += [b for b in bindings if b not in self.acls]
        return {b: done() for b in bindings}


def make(src, dst, **props) -> AclSync:
    f = flow(**props)
    return AclSync(f, src, dst, lambda t: f.policy.format_remote_topic("A", t),
                   logging.getLogger("t"))


def test_sync_creates_the_mapped_bindings_on_the_target_every_time():
    src = FakeAdmin([acl("orders", "READ"), acl("orders", "WRITE"), acl("skip", "READ")])
    dst = FakeAdmin()
    s = make(src, dst, **{"A->B.topics": "orders"})
    assert s.sync() == 1
    assert dst.acls == [acl("A.orders", "READ")]
    assert s.sync() == 1 and dst.acls == [acl("A.orders", "READ")]    # existing: no change


def test_no_authorizer_on_either_side_is_reported_once_and_skipped(caplog):
    src = FakeAdmin(error=KafkaError.SECURITY_DISABLED)
    dst = FakeAdmin()
    s = make(src, dst)
    with caplog.at_level(logging.WARNING):
        assert s.sync() == 0 and s.sync() == 0
    assert caplog.text.count("topic ACLs not synced: A has no authorizer") == 1
    assert dst.calls == []
    caplog.clear()
    src = FakeAdmin([acl("orders", "READ")])
    dst = FakeAdmin(error=KafkaError.SECURITY_DISABLED)
    s = make(src, dst)
    with caplog.at_level(logging.WARNING):
        assert s.sync() == 0 and s.sync() == 0
    assert caplog.text.count("topic ACLs not synced: B has no authorizer") == 1
    assert dst.calls == ["create", "create"]                        # tried at each refresh
