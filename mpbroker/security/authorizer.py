"""Kafka's ACL authorizer (AclAuthorizer / StandardAuthorizer semantics), pure.

`Authorizer(acls, super_users, allow_if_no_acl).authorize(principal, host, op, type, name)`:

1. a super user (`super.users`) is allowed everything;
2. the ACLs that apply to the resource are the LITERAL ones on its name, the LITERAL
   ones on `*` and the PREFIXED ones whose prefix starts its name; when there is none,
   the answer is `allow.everyone.if.no.acl.found`;
3. a DENY entry matching the principal (or `User:*`), the host (or `*`) and the
   operation (or ALL) denies: DENY wins;
4. an ALLOW entry matching principal, host and the operation, ALL, or an operation that
   implies it allows: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
   DESCRIBE_CONFIGS (implications apply to ALLOW only, as in Kafka);
5. otherwise denied.

`DecisionCache` is the per-connection memo of decisions (keyed by (op, type, name)),
thrown away when the ACL version it was made under changes.

`is_acl_authorizer(class_name)` says whether `authorizer.class.name` names the ACL
authorizer (Kafka's two class names or mpbroker's own); `super_users(value)` parses the
semicolon-separated `super.users`.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from .acl import (ALL, ALLOW, ALTER, ALTER_CONFIGS, DELETE, DENY, DESCRIBE, DESCRIBE_CONFIGS,
                  LITERAL, PREFIXED, READ, WILDCARD, WILDCARD_PRINCIPAL, WRITE, AclBinding)

ACL_AUTHORIZER_CLASSES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "mpbroker.security.authorizer.Authorizer",
})

# operation asked -> the ALLOW operations that grant it (besides ALL)
IMPLIED_BY = {
    DESCRIBE: frozenset({DESCRIBE, READ, WRITE, DELETE, ALTER}),
    DESCRIBE_CONFIGS: frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS}),
}


def is_acl_authorizer(class_name: str) -> bool:
    return class_name.strip() in ACL_AUTHORIZER_CLASSES


def super_users(value: str | None) -> frozenset:
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


Entry = Tuple[str, str, int, int]          # principal, host, operation, permission


class Authorizer:
    def __init__(self, acls: Iterable[AclBinding] = (), super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.literal: Dict[Tuple[int, str], List[Entry]] = {}
        self.prefixed: Dict[int, List[Tuple[str, List[Entry]]]] = {}
        by_prefix: Dict[Tuple[int, str], List[Entry]] = {}
        for b in acls:
            entry = (b.principal, b.host, b.operation, b.permission)
            if b.pattern_type == LITERAL:
                self.literal.setdefault((b.resource_type, b.name), []).append(entry)
            elif b.pattern_type == PREFIXED:
                by_prefix.setdefault((b.resource_type, b.name), []).append(entry)
        for (rtype, prefix), entries in sorted(by_prefix.items()):
            self.prefixed.setdefault(rtype, []).append((prefix, entries))

    def matching(self, resource_type: int, name: str) -> List[Entry]:
        out = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out += self.literal.get((resource_type, WILDCARD), ())
        for prefix, entries in self.prefixed.get(resource_type, ()):
            if name.startswith(prefix):
                out += entries
        return out

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self.matching(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        for p, h, op, perm in entries:
            if perm == DENY and (op == operation or op == ALL) and p in principals and h in hosts:
                return False
        granting = IMPLIED_BY.get(operation) or (operation,)
        for p, h, op, perm in entries:
            if perm == ALLOW and (op in granting or op == ALL) and p in principals and h in hosts:
                return True
        return False

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether some resource of the type allows `operation` (KIP-679's "WRITE on any
        topic" for idempotent producers): an ALLOW entry for the principal that no DENY
        of the same scope undoes, or no ACL at all with allow.everyone.if.no.acl.found."""
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        lists = [e for (t, _), e in self.literal.items() if t == resource_type]
        lists += [e for _, e in self.prefixed.get(resource_type, ())]
        if not lists:
            return self.allow_if_no_acl
        for entries in lists:
            denied = any(perm == DENY and op in (operation, ALL) and p in principals
                         and h in hosts for p, h, op, perm in entries)
            if not denied and any(perm == ALLOW and op in (operation, ALL) and p in principals
                                  and h in hosts for p, h, op, perm in entries):
                return True
        return False


class DecisionCache:
    """A connection's decisions under one ACL version (the worker's metadata's)."""

    __slots__ = ("version", "decisions")

    def __init__(self):
        self.version = None
        self.decisions: Dict[tuple, bool] = {}

    def get(self, version, key):
        if version != self.version:
            self.version = version
            self.decisions = {}
            return None
        return self.decisions.get(key)

    def put(self, key, allowed: bool) -> None:
        if len(self.decisions) > 10_000:      # a client naming endless topics
            self.decisions.clear()
        self.decisions[key] = allowed
