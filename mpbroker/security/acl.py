"""The ACL model (KIP-140), with Kafka's codes and validation rules; pure data.

Codes (org.apache.kafka.common.resource / acl):
  ResourceType  0 UNKNOWN 1 ANY 2 TOPIC 3 GROUP 4 CLUSTER 5 TRANSACTIONAL_ID 6 DELEGATION_TOKEN 7 USER
  PatternType   0 UNKNOWN 1 ANY 2 MATCH 3 LITERAL 4 PREFIXED      (ANY, MATCH: filters only)
  AclOperation  0 UNKNOWN 1 ANY 2 ALL 3 READ 4 WRITE 5 CREATE 6 DELETE 7 ALTER 8 DESCRIBE
                9 CLUSTER_ACTION 10 DESCRIBE_CONFIGS 11 ALTER_CONFIGS 12 IDEMPOTENT_WRITE
                13 CREATE_TOKENS 14 DESCRIBE_TOKENS
  Permission    0 UNKNOWN 1 ANY 2 DENY 3 ALLOW

`AclBinding` is one stored ACL (a resource pattern plus an access control entry);
`AclFilter` is what DescribeAcls / DeleteAcls send. `validate_binding` and
`validate_filter` raise `InvalidAcl(message)` with Kafka's messages (answered as
INVALID_REQUEST). The names (`TYPE_NAMES`, `OP_NAMES`, `PERM_NAMES`) are the ones Kafka
writes in ZooKeeper's ACL JSON and the CLI prints.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

# resource types
UNKNOWN, ANY = 0, 1
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
# pattern types
MATCH, LITERAL, PREFIXED = 2, 3, 4
# operations
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS = 13, 14
# permission types
DENY, ALLOW = 2, 3

CLUSTER_NAME = "kafka-cluster"      # the one name of the CLUSTER resource
WILDCARD = "*"                      # the wildcard resource name and host
WILDCARD_PRINCIPAL = "User:*"

TYPE_NAMES = {TOPIC: "Topic", GROUP: "Group", CLUSTER: "Cluster",
              TRANSACTIONAL_ID: "TransactionalId", DELEGATION_TOKEN: "DelegationToken",
              USER: "User"}
OP_NAMES = {ALL: "All", READ: "Read", WRITE: "Write", CREATE: "Create", DELETE: "Delete",
            ALTER: "Alter", DESCRIBE: "Describe", CLUSTER_ACTION: "ClusterAction",
            DESCRIBE_CONFIGS: "DescribeConfigs", ALTER_CONFIGS: "AlterConfigs",
            IDEMPOTENT_WRITE: "IdempotentWrite", CREATE_TOKENS: "CreateTokens",
            DESCRIBE_TOKENS: "DescribeTokens"}
PERM_NAMES = {ALLOW: "Allow", DENY: "Deny"}
PATTERN_NAMES = {LITERAL: "LITERAL", PREFIXED: "PREFIXED", MATCH: "MATCH", ANY: "ANY"}

TYPE_BY_NAME = {v.lower(): k for k, v in TYPE_NAMES.items()}
OP_BY_NAME = {v.lower(): k for k, v in OP_NAMES.items()}
PERM_BY_NAME = {v.lower(): k for k, v in PERM_NAMES.items()}
PATTERN_BY_NAME = {v.lower(): k for k, v in PATTERN_NAMES.items()}


class InvalidAcl(ValueError):
    """An ACL or filter Kafka refuses with INVALID_REQUEST; the message is Kafka's."""


class AclBinding(NamedTuple):
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def describe(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={OP_NAMES.get(self.operation, self.operation)}, "
                f"permissionType={PERM_NAMES.get(self.permission, self.permission)}) on "
                f"{TYPE_NAMES.get(self.resource_type, self.resource_type)}:"
                f"{PATTERN_NAMES.get(self.pattern_type, self.pattern_type)}:{self.name}")


class AclFilter(NamedTuple):
    """None / ANY match everything in their field."""
    resource_type: int = ANY
    name: Optional[str] = None
    pattern_type: int = ANY
    principal: Optional[str] = None
    host: Optional[str] = None
    operation: int = ANY
    permission: int = ANY

    def matches(self, b: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches + AccessControlEntryFilter.matches."""
        if self.resource_type != ANY and self.resource_type != b.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (ANY, MATCH) and pt != b.pattern_type:
            return False
        if self.name is not None:
            if pt == ANY or pt == b.pattern_type:
                if self.name != b.name:
                    return False
            elif b.pattern_type == LITERAL:      # MATCH: what would apply to `name`
                if b.name != self.name and b.name != WILDCARD:
                    return False
            elif not self.name.startswith(b.name):
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == ANY or self.operation == b.operation)
                and (self.permission == ANY or self.permission == b.permission))


def validate_binding(b: AclBinding) -> None:
    """Kafka's checks of an ACL to create (AclControlManager.validateNewAcl, AclApis)."""
    if b.resource_type not in TYPE_NAMES or b.resource_type == USER:
        raise InvalidAcl(f"Invalid resourceType {b.resource_type}")
    if b.pattern_type not in (LITERAL, PREFIXED):
        raise InvalidAcl(f"Invalid patternType {b.pattern_type}")
    if b.operation not in OP_NAMES:
        raise InvalidAcl(f"Invalid operation {b.operation}")
    if b.permission not in PERM_NAMES:
        raise InvalidAcl(f"Invalid permissionType {b.permission}")
    if not b.name:
        raise InvalidAcl("Resource name should not be empty")
    if b.resource_type == CLUSTER and b.name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if ":" not in (b.principal or ""):
        raise InvalidAcl(f"Could not parse principal from `{b.principal}` "
                         "(no colon is present separating the principal type from name)")
    if not b.host:
        raise InvalidAcl("Invalid host: should not be empty")


def validate_filter(f: AclFilter) -> None:
    """Kafka refuses a filter holding an UNKNOWN element (or a code it does not know)."""
    if (f.resource_type not in TYPE_NAMES and f.resource_type != ANY
            or f.pattern_type not in PATTERN_NAMES
            or f.operation not in OP_NAMES and f.operation != ANY
            or f.permission not in PERM_NAMES and f.permission != ANY):
        raise InvalidAcl("The filter contained an UNKNOWN element")


def binding_from_wire(c: dict) -> AclBinding:
    """A CreateAcls creation (v0 has no pattern type: LITERAL)."""
    return AclBinding(c["resource_type"], c["resource_name"], c.get("resource_pattern_type", LITERAL),
                      c["principal"], c["host"], c["operation"], c["permission_type"])


def filter_from_wire(f: dict) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter (v0: LITERAL)."""
    return AclFilter(f["resource_type_filter"], f["resource_name_filter"],
                     f.get("pattern_type_filter", LITERAL), f["principal_filter"],
                     f["host_filter"], f["operation"], f["permission_type"])


def binding_to_dict(b: AclBinding) -> dict:
    """JSON for the embedded store (codes, not names: the file is ours)."""
    return list(b)


def binding_from_dict(d) -> AclBinding:
    return AclBinding(*d)
