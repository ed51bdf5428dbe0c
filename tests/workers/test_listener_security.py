import pytest

from tests.security.certs import KEY_PASSWORD
from workers.listener_security import (ListenerSecurity, SecurityConfigError,
                                       listener_securities)

JAAS = 'x.PlainLoginModule required user_a="b";'


def test_each_protocol_gets_what_it_needs(certs):
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
           "ssl.key.password": KEY_PASSWORD, "sasl.enabled.mechanisms": "GSSAPI,PLAIN",
           "sasl.jaas.config": JAAS, "connections.max.reauth.ms": 5000}
    plain, tls, sasl, sasl_ssl = listener_securities(cfg, [
        ("PLAINTEXT", "PLAINTEXT"), ("SSL", "SSL"), ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
        ("SASL_SSL", "SASL_SSL")])
    assert plain.ssl_context is None and not plain.sasl and plain.new_session(None, None) is None
    assert tls.ssl_context is not None and not tls.sasl
    assert sasl.ssl_context is None and sasl.mechanisms == ["PLAIN"]      # GSSAPI not served
    assert sasl_ssl.ssl_context is not None
    session = sasl_ssl.new_session(None, lambda: 0.0)
    assert session.listener_name == "SASL_SSL" and session.reauth_ms == 5000
    assert ListenerSecurity.plaintext().protocol == "PLAINTEXT"


@pytest.mark.parametrize("cfg, spec, message", [
    ({}, ("SSL", "SSL"), "listener SSL: ssl.keystore.location"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
     "sasl.enabled.mechanisms=GSSAPI: none of them is served"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
     "plain.sasl.jaas.config"),
    ({"ssl.principal.mapping.rules": "RULE:bad"}, ("PLAINTEXT", "PLAINTEXT"), "Invalid rule"),
])
def test_unservable_settings_are_one_line(cfg, spec, message):
    with pytest.raises(SecurityConfigError, match=message):
        listener_securities(cfg, [spec])


def test_sasl_ssl_takes_only_the_listener_prefixed_client_auth(certs):
    """KIP-684: the broker-wide ssl.client.auth does not apply to SASL_SSL listeners."""
    import ssl
    cfg = {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
           "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM",
           "ssl.truststore.location": certs.ca, "ssl.client.auth": "required",
           "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS}
    ssl_l, sasl_ssl = listener_securities(cfg, [("SSL", "SSL"), ("SASL_SSL", "SASL_SSL")])
    assert ssl_l.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert sasl_ssl.ssl_context.verify_mode == ssl.CERT_NONE
    (prefixed,) = listener_securities({**cfg, "listener.name.sasl_ssl.ssl.client.auth": "requested"},
                                      [("SASL_SSL", "SASL_SSL")])
    assert prefixed.ssl_context.verify_mode == ssl.CERT_OPTIONAL
