"""CreateAcls / DeleteAcls as the controller applies them (both controllers), pure.

`create_acls(acls, bindings)` and `delete_acls(acls, filters)` take the stored ACLs
(`ClusterMetadata.acls`) and the wire-decoded request items (mpbroker/security/acl.py:
`binding_from_wire`, `filter_from_wire`) and return `(new_acls, results)`, results in
the request's order and in the response's shape: a creation's `{error_code,
error_message}`, a filter's `{error_code, error_message, matching_acls}`. An invalid
item gets INVALID_REQUEST with Kafka's message and changes nothing; the valid ones of
the same request are applied (Kafka does the same). Creating an ACL that exists is a
success that adds nothing.
"""
from __future__ import annotations

from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.acl import AclBinding, AclFilter, InvalidAcl, validate_binding, validate_filter


def invalid(check, item) -> dict | None:
    """The INVALID_REQUEST result of an item `check` refuses, else None."""
    try:
        check(item)
    except InvalidAcl as e:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e)}
    return None


def create_acls(acls, bindings: list[AclBinding]) -> tuple[tuple, list[dict]]:
    out = set(acls)
    results = []
    for b in bindings:
        bad = invalid(validate_binding, b)
        if bad is None:
            out.add(b)
        results.append(bad or {"error_code": 0, "error_message": None})
    return tuple(sorted(out)), results


def matching_acl(b: AclBinding) -> dict:
    return {"error_code": 0, "error_message": None, "resource_type": b.resource_type,
            "resource_name": b.name, "pattern_type": b.pattern_type, "principal": b.principal,
            "host": b.host, "operation": b.operation, "permission_type": b.permission}


def delete_acls(acls, filters: list[AclFilter]) -> tuple[tuple, list[dict]]:
    remaining = list(acls)
    results = []
    for f in filters:
        bad = invalid(validate_filter, f)
        if bad is not None:
            results.append({**bad, "matching_acls": []})
            continue
        gone = [b for b in remaining if f.matches(b)]
        remaining = [b for b in remaining if not f.matches(b)]
        results.append({"error_code": 0, "error_message": None,
                        "matching_acls": [matching_acl(b) for b in gone]})
    return tuple(sorted(remaining)), results
