from types import SimpleNamespace

from mpbroker.protocol.errors import ErrorCode
from workers.handlers import sasl_handshake
from workers.listener_security import ListenerSecurity

CFG = {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": 'x.PlainLoginModule required user_a="b";'}


def ctx(version=1, sasl=None):
    return SimpleNamespace(api_version=version, connection=SimpleNamespace(sasl=sasl))


def session():
    return ListenerSecurity.from_config(CFG, "SASL_PLAINTEXT", "SASL_PLAINTEXT").new_session(None, lambda: 0.0)


def test_enabled_mechanism_and_the_enabled_list():
    s = session()
    assert sasl_handshake.handle(None, ctx(1, s), {"mechanism": "PLAIN"}) == \
        {"error_code": ErrorCode.NONE, "mechanisms": ["PLAIN"]}
    assert sasl_handshake.handle(None, ctx(1, session()), {"mechanism": "GSSAPI"}) == \
        {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["PLAIN"]}


def test_a_listener_without_sasl_is_an_illegal_state():
    assert sasl_handshake.handle(None, ctx(), {"mechanism": "PLAIN"})["error_code"] == \
        ErrorCode.ILLEGAL_SASL_STATE
