"""The ACL model: Kafka's validation messages and filter matching."""
import pytest

from mpbroker.security.acl import (ALLOW, ANY, CLUSTER, DENY, GROUP, LITERAL, MATCH, PREFIXED, READ,
                                   TOPIC, UNKNOWN, WRITE, AclBinding, AclFilter, InvalidAcl,
                                   binding_from_wire, filter_from_wire, validate_binding,
                                   validate_filter)

B = AclBinding(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)


@pytest.mark.parametrize("change, message", [
    ({"resource_type": ANY}, "Invalid resourceType 1"),
    ({"pattern_type": MATCH}, "Invalid patternType 2"),
    ({"operation": ANY}, "Invalid operation 1"),
    ({"permission": UNKNOWN}, "Invalid permissionType 0"),
    ({"name": ""}, "Resource name should not be empty"),
    ({"resource_type": CLUSTER, "name": "x"}, "The only valid name for the CLUSTER resource is kafka-cluster"),
    ({"principal": "alice"}, "Could not parse principal from `alice`"),
])
def test_invalid_bindings(change, message):
    with pytest.raises(InvalidAcl, match=message):
        validate_binding(B._replace(**change))
    validate_binding(B)


def test_filters():
    lit = B
    pre = B._replace(name="ord", pattern_type=PREFIXED)
    star = B._replace(name="*")
    grp = B._replace(resource_type=GROUP)
    assert AclFilter().matches(lit) and AclFilter().matches(grp)
    assert AclFilter(TOPIC, "orders", LITERAL).matches(lit)
    assert not AclFilter(TOPIC, "orders", LITERAL).matches(pre)
    m = AclFilter(TOPIC, "orders", MATCH)
    assert m.matches(lit) and m.matches(pre) and m.matches(star) and not m.matches(grp)
    assert not AclFilter(TOPIC, "ord", ANY).matches(lit) and AclFilter(TOPIC, "ord", ANY).matches(pre)
    assert not AclFilter(principal="User:bob").matches(lit)
    assert not AclFilter(operation=WRITE).matches(lit)
    assert not AclFilter(permission=DENY).matches(lit)
    with pytest.raises(InvalidAcl, match="UNKNOWN"):
        validate_filter(AclFilter(pattern_type=UNKNOWN))
    validate_filter(AclFilter())


def test_wire_forms_v0_default_to_literal():
    c = {"resource_type": TOPIC, "resource_name": "t", "principal": "User:a", "host": "*",
         "operation": READ, "permission_type": ALLOW}
    assert binding_from_wire(c).pattern_type == LITERAL
    f = {"resource_type_filter": TOPIC, "resource_name_filter": None, "principal_filter": None,
         "host_filter": None, "operation": ANY, "permission_type": ANY}
    assert filter_from_wire(f) == AclFilter(TOPIC, None, LITERAL)
