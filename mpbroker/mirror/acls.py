"""Topic ACL sync of one flow (sync.topic.acls.enabled, MirrorSourceConnector's): at
every topic refresh the source's ACLs on TOPIC resources are read (DescribeAcls); those
on the LITERAL name of a topic the flow replicates are mapped to the remote topic
(LITERAL) and created on the target (CreateAcls; creating an ACL that exists changes
nothing, so each refresh sends them all). Mapped as MM2 maps them: ALLOW WRITE is
dropped (only the mirror writes a remote topic), ALLOW ALL becomes ALLOW READ, every
other binding (DENY ones included) keeps its principal, host, operation and permission.
ACLs are only added: one deleted at the source stays at the target, as in MM2.

A cluster without an authorizer (SECURITY_DISABLED) or without the ACL APIs is
reported once (until the sync works again) and the sync skipped until the next refresh;
nothing here stops the flow. `target_bindings` is the decision, without I/O; `AclSync`
makes the calls (the AdminClients of the flow).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, List, Optional

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, ResourcePatternType, ResourceType)

from mpbroker.mirror.config import FlowConfig

TIMEOUT_S = 15.0
# Every ACL on a topic, whatever its pattern (MM2's ANY_TOPIC_ACL filter).
ANY_TOPIC_ACL = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)


def target_bindings(source: Iterable[AclBinding], replicates: Callable[[str], bool],
                    remote: Callable[[str], str]) -> List[AclBinding]:
    """The bindings to create on the target for the source's `source` bindings, in their
    order, without repeats (ALLOW ALL and ALLOW READ of one principal and host meet)."""
    out: List[AclBinding] = []
    for b in source:
        if b.restype != ResourceType.TOPIC or b.resource_pattern_type != ResourcePatternType.LITERAL:
            continue
        allow = b.permission_type == AclPermissionType.ALLOW
        if (allow and b.operation == AclOperation.WRITE) or not replicates(b.name):
            continue
        op = AclOperation.READ if allow and b.operation == AclOperation.ALL else b.operation
        mapped = AclBinding(ResourceType.TOPIC, remote(b.name), ResourcePatternType.LITERAL,
                            b.principal, b.host, op, b.permission_type)
        if mapped not in out:
            out.append(mapped)
    return out


def _error(e: KafkaException) -> KafkaError:
    err = e.args[0] if e.args else None
    return err if isinstance(err, KafkaError) else KafkaError(KafkaError._FAIL, str(e))


class AclSync:
    def __init__(self, flow: FlowConfig, source: AdminClient, target: AdminClient,
                 remote: Callable[[str], str], log: logging.Logger):
        self.flow = flow
        self.source = source
        self.target = target
        self.remote = remote
        self.log = log
        self._reported: Optional[tuple] = None          # (cluster, error code) told once

    def sync(self) -> int:
        """One sync; the number of bindings the target accepted (0 when skipped)."""
        f = self.flow
        try:
            found = self.source.describe_acls(ANY_TOPIC_ACL, request_timeout=TIMEOUT_S) \
                .result(TIMEOUT_S)
        except KafkaException as e:
            self._skip(f.source, _error(e))
            return 0
        wanted = target_bindings(found, f.replicates_topic, self.remote)
        if not wanted:
            self._reported = None
            return 0
        futs = self.target.create_acls(wanted, request_timeout=TIMEOUT_S)
        done = 0
        for binding, fut in futs.items():
            try:
                fut.result(TIMEOUT_S)
                done += 1
            except KafkaException as e:
                err = _error(e)
                if self._disabled(err):
                    self._skip(f.target, err)
                    return done
                self.log.warning("cannot create ACL %s on %s: %s (retried at the next refresh)",
                                 binding, f.target, err.str())
        self._reported = None
        return done

    @staticmethod
    def _disabled(err: KafkaError) -> bool:
        return err.code() in (KafkaError.SECURITY_DISABLED, KafkaError._UNSUPPORTED_FEATURE,
                              KafkaError.UNSUPPORTED_VERSION)

    def _skip(self, cluster: str, err: KafkaError) -> None:
        key = (cluster, err.code())
        if key != self._reported:
            self._reported = key
            what = "has no authorizer" if self._disabled(err) else "cannot be read"
            self.log.warning("topic ACLs not synced: %s %s (%s); skipped until the next "
                             "refresh", cluster, what, err.str())
