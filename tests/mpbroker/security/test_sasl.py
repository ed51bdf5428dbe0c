from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security import plain, sasl
from mpbroker.security.listener_config import ListenerConfig

JAAS = 'x.PlainLoginModule required user_alice="pw" user_bob="pw2";'


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def session(reauth_ms=0, clock=None):
    return sasl.SaslSession("SASL_SSL", ListenerConfig({"sasl.jaas.config": JAAS}, "SASL_SSL"),
                            ["PLAIN"], reauth_ms=reauth_ms, clock=clock or Clock())


def test_before_authentication_only_the_sasl_apis_and_api_versions():
    s = session()
    assert s.allows(api_keys.API_VERSIONS) and s.allows(api_keys.SASL_HANDSHAKE)
    assert not s.allows(api_keys.METADATA) and not s.allows(api_keys.SASL_AUTHENTICATE)
    assert s.handshake(1, "PLAIN") == ErrorCode.NONE and s.state == sasl.AUTHENTICATE
    assert s.allows(api_keys.SASL_AUTHENTICATE) and not s.allows(api_keys.PRODUCE)
    assert s.authenticate(plain.client_token("alice", "pw")) == b""
    assert s.state == sasl.COMPLETE and s.principal == "User:alice"
    assert s.allows(api_keys.PRODUCE) and s.session_lifetime_ms() == 0


def test_v0_handshake_expects_a_bare_token():
    s = session()
    assert s.handshake(0, "PLAIN") == ErrorCode.NONE and s.raw_token_expected
    s.authenticate(plain.client_token("bob", "pw2"))
    assert s.principal == "User:bob" and not s.raw_token_expected


def test_unknown_or_disabled_mechanism_and_out_of_turn_handshake():
    s = session()
    assert s.handshake(1, "SCRAM-SHA-256") == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert s.state == sasl.FAILED
    s = session()
    s.handshake(1, "PLAIN")
    assert s.handshake(1, "PLAIN") == ErrorCode.ILLEGAL_SASL_STATE


def test_a_failed_token_fails_the_session_and_a_mechanism_bug_is_an_auth_failure():
    s = session()
    s.handshake(1, "PLAIN")
    try:
        s.authenticate(plain.client_token("alice", "nope"))
    except sasl.SaslAuthenticationError as e:
        assert "Invalid username or password" in str(e)
    assert s.state == sasl.FAILED

    class Broken:
        mechanism, complete, authorization_id = "BROKEN", False, ""

        def evaluate(self, token):
            raise IndexError("bug")
    sasl.register("BROKEN", lambda **kw: Broken())
    try:
        s = sasl.SaslSession("L", ListenerConfig({}, "L"), ["BROKEN"], clock=Clock())
        s.handshake(1, "BROKEN")
        try:
            s.authenticate(b"x")
            raise AssertionError("no failure")
        except sasl.SaslAuthenticationError as e:
            assert "BROKEN" in str(e)
    finally:
        del sasl.MECHANISMS["BROKEN"]


def test_kip368_session_lifetime_expiry_and_reauthentication():
    clock = Clock()
    s = session(reauth_ms=5000, clock=clock)
    s.handshake(1, "PLAIN")
    s.authenticate(plain.client_token("alice", "pw"))
    assert s.session_lifetime_ms() == 5000
    clock.now += 5
    assert s.expired() and not s.allows(api_keys.FETCH) and s.allows(api_keys.SASL_HANDSHAKE)
    assert s.handshake(1, "PLAIN") == ErrorCode.NONE
    s.authenticate(plain.client_token("alice", "pw"))
    assert not s.expired() and s.allows(api_keys.FETCH)


def test_reauthentication_cannot_change_the_principal():
    clock = Clock()
    s = session(reauth_ms=1000, clock=clock)
    s.handshake(1, "PLAIN")
    s.authenticate(plain.client_token("alice", "pw"))
    clock.now += 2
    s.handshake(1, "PLAIN")
    try:
        s.authenticate(plain.client_token("bob", "pw2"))
        raise AssertionError("principal changed")
    except sasl.SaslAuthenticationError as e:
        assert "Cannot change principals" in str(e)


def test_enabled_mechanisms_from_a_list_or_a_string():
    assert sasl.enabled_mechanisms({"sasl.enabled.mechanisms": "plain, SCRAM-SHA-256"}) == \
        ["PLAIN", "SCRAM-SHA-256"]
    assert sasl.enabled_mechanisms({"sasl.enabled.mechanisms": ["PLAIN"]}) == ["PLAIN"]
