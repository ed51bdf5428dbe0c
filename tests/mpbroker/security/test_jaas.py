import pytest

from mpbroker.security import jaas

PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
         'username="admin" password="a\\"b" user_admin="admin-secret" user_alice=alice;')


def test_kafkas_plain_line_parses_with_quoted_escaped_and_bare_values():
    (e,) = jaas.parse(PLAIN)
    assert e.login_module.endswith("PlainLoginModule") and e.flag == "required"
    assert e.options == {"username": "admin", "password": 'a"b', "user_admin": "admin-secret",
                         "user_alice": "alice"}


def test_a_module_without_options_and_several_modules():
    entries = jaas.parse("org.apache.kafka.common.security.scram.ScramLoginModule required; "
                         "x.Other optional k=v;")
    assert [(e.login_module.rsplit(".", 1)[-1], e.flag, e.options) for e in entries] == [
        ("ScramLoginModule", "required", {}), ("Other", "optional", {"k": "v"})]


@pytest.mark.parametrize("text, message", [
    ("x.PlainLoginModule required user_a=\"b\"", "missing ';'"),
    ("x.PlainLoginModule mandatory;", "control flag"),
    ("x.PlainLoginModule required user_a=;", "has no value"),
    ("x.PlainLoginModule required user_a;", "has no value"),
])
def test_malformed_lines_name_the_problem_not_the_secret(text, message):
    with pytest.raises(jaas.JaasError, match=message) as e:
        jaas.parse(text)
    assert '"b"' not in str(e.value)


def test_login_module_wants_exactly_one_of_the_expected_class():
    assert jaas.login_module(PLAIN, "PlainLoginModule").options["user_alice"] == "alice"
    with pytest.raises(jaas.JaasError, match="should be 1 module"):
        jaas.login_module(PLAIN + " " + PLAIN, "PlainLoginModule")
    with pytest.raises(jaas.JaasError, match="is not a PlainLoginModule"):
        jaas.login_module("a.ScramLoginModule required;", "PlainLoginModule")
