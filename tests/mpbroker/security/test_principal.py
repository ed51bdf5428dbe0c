import pytest

from mpbroker.security import principal as P

KAFKA_DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                   "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                   "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT")


@pytest.mark.parametrize("dn, name", [
    # the examples of Kafka's SslPrincipalMapperTest
    ("CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
    ("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US", "duke@javasoft"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US,CN=AdminUser", "adminuser"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_kafkas_documented_rules(dn, name):
    assert P.map_dn(P.parse_rules(KAFKA_DOC_RULES), dn) == name


def test_upper_case_flag_escaped_slash_and_no_matching_rule():
    rules = P.parse_rules(r"RULE:^CN=([^,]*),.*$/$1\/x/U")
    assert P.map_dn(rules, "CN=alice,O=acme") == "ALICE/X"
    with pytest.raises(P.MappingError, match="No rules apply"):
        P.map_dn(rules, "O=acme")


def test_default_only_and_a_list_value():
    assert P.map_dn(P.parse_rules(None), "CN=a") == "CN=a"
    assert P.map_dn(P.parse_rules(["RULE:^CN=(.*)$/$1/", "DEFAULT"]), "CN=a") == "a"


@pytest.mark.parametrize("text", ["RULE:unterminated", "NOPE", "RULE:(/x/", "DEFAULT junk"])
def test_invalid_rules(text):
    with pytest.raises(P.MappingError):
        P.parse_rules(text)


def test_user_and_anonymous():
    assert P.user("alice") == "User:alice" and P.ANONYMOUS == "User:ANONYMOUS"
