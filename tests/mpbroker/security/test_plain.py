import pytest

from mpbroker.security import plain
from mpbroker.security.listener_config import ListenerConfig
from mpbroker.security.sasl import MECHANISMS, SaslAuthenticationError, SaslConfigError

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="b";')


def server():
    return plain.PlainServer(plain.users_from_jaas(JAAS))


def test_the_right_password_authenticates_with_or_without_the_same_authzid():
    for token in (plain.client_token("alice", "alice-secret"),
                  plain.client_token("alice", "alice-secret", authzid="alice")):
        s = server()
        assert s.evaluate(token) == b"" and s.complete and s.authorization_id == "alice"


@pytest.mark.parametrize("token, message", [
    (plain.client_token("alice", "wrong"), "Invalid username or password"),
    (plain.client_token("mallory", "alice-secret"), "Invalid username or password"),
    (plain.client_token("alice", "alice-secret", authzid="bob"), "authorization id"),
    (plain.client_token("", "x"), "username not specified"),
    (plain.client_token("alice", ""), "password not specified"),
    (b"alice\0alice-secret", "expected 3 tokens"),
    (b"\0alice\0\xff\xfe", "not UTF-8"),
])
def test_bad_tokens_fail_without_echoing_the_password(token, message):
    s = server()
    with pytest.raises(SaslAuthenticationError, match=message) as e:
        s.evaluate(token)
    assert "alice-secret" not in str(e.value) and "wrong" not in str(e.value)
    assert not s.complete


def test_the_factory_reads_the_listener_entry_then_sasl_jaas_config():
    other = JAAS.replace("alice-secret", "other")
    cfg = {"listener.name.sasl_ssl.plain.sasl.jaas.config": other, "sasl.jaas.config": JAAS}
    s = MECHANISMS["PLAIN"](listener_name="SASL_SSL", config=ListenerConfig(cfg, "SASL_SSL"))
    assert s.evaluate(plain.client_token("alice", "other")) == b""
    s = MECHANISMS["PLAIN"](listener_name="SASL_PLAINTEXT",
                            config=ListenerConfig(cfg, "SASL_PLAINTEXT"))
    assert s.evaluate(plain.client_token("alice", "alice-secret")) == b""
    with pytest.raises(SaslConfigError, match="plain.sasl.jaas.config"):
        MECHANISMS["PLAIN"](listener_name="X", config=ListenerConfig({}, "X"))


def test_the_client_steps():
    c = plain.PlainClient("alice", "alice-secret")
    assert c.first() == b"\0alice\0alice-secret" and not c.complete
    c.evaluate(b"")
    assert c.complete
