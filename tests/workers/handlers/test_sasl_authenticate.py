import asyncio
from types import SimpleNamespace

from mpbroker.protocol.errors import ErrorCode
from workers.handlers import sasl_authenticate
from workers.listener_security import ListenerSecurity

CFG = {"sasl.enabled.mechanisms": "PLAIN", "connections.max.reauth.ms": 60000,
       "connection.failed.authentication.delay.ms": 1,
       "sasl.jaas.config": 'x.PlainLoginModule required user_alice="pw";'}


def ctx():
    sec = ListenerSecurity.from_config(CFG, "SASL_PLAINTEXT", "SASL_PLAINTEXT")
    s = sec.new_session(None, lambda: 0.0)
    s.handshake(1, "PLAIN")
    return SimpleNamespace(api_version=1, client_host="127.0.0.1",
                           connection=SimpleNamespace(sasl=s, security=sec))


def test_success_tells_the_session_lifetime():
    c = ctx()
    assert sasl_authenticate.handle(None, c, {"auth_bytes": b"\0alice\0pw"}) == {
        "error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": b"",
        "session_lifetime_ms": 60000}
    assert c.connection.sasl.principal == "User:alice"


def test_failure_is_answered_after_the_delay_without_the_password(caplog):
    caplog.set_level("INFO")
    answer = sasl_authenticate.handle(None, ctx(), {"auth_bytes": b"\0alice\0secret-guess"})
    body = asyncio.run(answer)            # delayed by connection.failed.authentication.delay.ms
    assert body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Invalid username or password" in body["error_message"]
    assert "Failed authentication with 127.0.0.1" in caplog.text
    assert "secret-guess" not in caplog.text and "secret-guess" not in body["error_message"]


def test_no_sasl_on_the_listener():
    c = SimpleNamespace(api_version=1, connection=SimpleNamespace(sasl=None))
    assert sasl_authenticate.handle(None, c, {"auth_bytes": b""})["error_code"] == \
        ErrorCode.ILLEGAL_SASL_STATE
