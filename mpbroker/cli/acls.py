"""`mpbroker acls add|remove|list` (kafka-acls.sh), through confluent-kafka's
AdminClient (CreateAcls / DeleteAcls / DescribeAcls), against any broker a client
properties file reaches (`--command-config`, e.g. SASL_SSL settings).

    mpbroker acls add --allow-principal User:alice --operation Read --operation Describe \\
        --topic orders [--resource-pattern-type prefixed] [--allow-host 10.0.0.1]
    mpbroker acls add --deny-principal User:bob --operation Write --topic '*'
    mpbroker acls remove --allow-principal User:alice --operation Read --topic orders
    mpbroker acls list [--topic T | --group G | --cluster | --transactional-id X]
        [--principal User:alice] [--resource-pattern-type any|match|literal|prefixed]

add needs a principal, one resource and at least one operation (kafka-acls without
--operation means All); remove deletes what matches (no principal: every principal;
no operation: every operation); list prints the matching ACLs one a line, as
kafka-acls prints them. Hosts default to `*`.
"""
from __future__ import annotations

from mpbroker.cli import admin
from mpbroker.security.acl import CLUSTER_NAME, OP_BY_NAME

RESOURCE_FLAGS = (("topic", "TOPIC"), ("group", "GROUP"), ("transactional_id", "TRANSACTIONAL_ID"))


def _operations(args) -> list[str]:
    ops = []
    for op in args.operation or ["All"]:
        key = op.replace("-", "").replace("_", "").lower()
        match = next((name for name, code in OP_BY_NAME.items() if name == key), None)
        if match is None:
            raise admin.CliError(f"unknown --operation {op!r} (one of: "
                                 f"{', '.join(sorted(OP_BY_NAME))})", 2)
        ops.append({"idempotentwrite": "IDEMPOTENT_WRITE", "clusteraction": "CLUSTER_ACTION",
                    "describeconfigs": "DESCRIBE_CONFIGS", "alterconfigs": "ALTER_CONFIGS",
                    "createtokens": "CREATE_TOKENS", "describetokens": "DESCRIBE_TOKENS"}
                   .get(match, match.upper()))
    return ops


def _resources(args, needed: bool) -> list[tuple[str, str | None]]:
    out = [(rt, getattr(args, flag)) for flag, rt in RESOURCE_FLAGS if getattr(args, flag) is not None]
    if args.cluster:
        out.append(("BROKER", CLUSTER_NAME))
    if needed and not out:
        raise admin.CliError("give a resource: --topic, --group, --cluster or --transactional-id", 2)
    return out


def _principals(args) -> list[tuple[str, str, str]]:
    """(principal, permission, host) of each --allow-principal / --deny-principal."""
    out = [(p, "ALLOW", h) for p in args.allow_principal for h in (args.allow_host or ["*"])]
    out += [(p, "DENY", h) for p in args.deny_principal for h in (args.deny_host or ["*"])]
    return out


def _pattern(args, default: str) -> str:
    return (args.resource_pattern_type or default).upper()


def cmd_add(args) -> int:
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    principals = _principals(args)
    if not principals:
        raise admin.CliError("acls add needs --allow-principal or --deny-principal", 2)
    pattern = _pattern(args, "literal")
    if pattern not in ("LITERAL", "PREFIXED"):
        raise admin.CliError("acls add: --resource-pattern-type must be literal or prefixed", 2)
    bindings = [AclBinding(ResourceType[rt], name, ResourcePatternType[pattern], p, host,
                           AclOperation[op], AclPermissionType[perm])
                for rt, name in _resources(args, True) for p, perm, host in principals
                for op in _operations(args)]
    client = admin.admin_client(args)
    for f in client.create_acls(bindings, request_timeout=admin.timeout_s(args)).values():
        admin.result(f, args)
    admin.emit(args, {"added": [_row(b) for b in bindings]},
               (f"Adding ACL {_line(b)}" for b in bindings))
    return 0


def _filters(args):
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    pattern = _pattern(args, "any" if args.action == "list" else "literal")
    resources = _resources(args, args.action == "remove") or [("ANY", None)]
    people = _principals(args) or [(args.principal, "ANY", None)]
    ops = _operations(args) if args.operation else ["ANY"]
    return [AclBindingFilter(ResourceType[rt], name, ResourcePatternType[pattern], p,
                             None if host == "*" and args.action == "list" else host,
                             AclOperation[op], AclPermissionType[perm])
            for rt, name in resources for p, perm, host in people for op in ops]


def cmd_remove(args) -> int:
    client = admin.admin_client(args)
    filters = _filters(args)
    removed = []
    for f in client.delete_acls(filters, request_timeout=admin.timeout_s(args)).values():
        removed += admin.result(f, args)
    admin.emit(args, {"removed": [_row(b) for b in removed]},
               (f"Removed ACL {_line(b)}" for b in removed))
    return 0


def cmd_list(args) -> int:
    client = admin.admin_client(args)
    found = []
    for f in _filters(args):
        found += admin.result(client.describe_acls(f, request_timeout=admin.timeout_s(args)), args)
    found = sorted(set(found), key=_row_key)
    admin.emit(args, {"acls": [_row(b) for b in found]}, (_line(b) for b in found))
    return 0


def _row(b) -> dict:
    return {"resource_type": b.restype.name, "name": b.name, "pattern_type": b.resource_pattern_type.name,
            "principal": b.principal, "host": b.host, "operation": b.operation.name,
            "permission": b.permission_type.name}


def _row_key(b):
    return tuple(str(v) for v in _row(b).values())


def _line(b) -> str:
    r = _row(b)
    return (f"ResourcePattern(resourceType={r['resource_type']}, name={r['name']}, "
            f"patternType={r['pattern_type']}): (principal={r['principal']}, host={r['host']}, "
            f"operation={r['operation']}, permissionType={r['permission']})")


def register(sub) -> None:
    p = sub.add_parser("acls", help="add, remove or list ACLs (kafka-acls)")
    p.add_argument("action", choices=("add", "remove", "list"))
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--principal", help="list: only this principal's ACLs")
    p.add_argument("--operation", action="append", metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, All (repeatable; add: default All)")
    p.add_argument("--topic")
    p.add_argument("--group")
    p.add_argument("--transactional-id")
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", choices=("literal", "prefixed", "match", "any"))
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run({"add": cmd_add, "remove": cmd_remove,
                                             "list": cmd_list}[a.action], a))
