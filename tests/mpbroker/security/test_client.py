import pytest

from mpbroker import config as configmod
from mpbroker.security.client import (ClientSecurity, ClientSecurityError, inter_broker,
                                      librdkafka_properties)
from tests.security.certs import KEY_PASSWORD

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="pw" user_broker="pw";')


def test_plaintext_is_none_and_sasl_reads_librdkafka_or_java_keys(certs):
    assert ClientSecurity.from_properties({}) is None
    s = ClientSecurity.from_properties({"security.protocol": "sasl_plaintext", "sasl.mechanism": "plain",
                                        "sasl.username": "u", "sasl.password": "p"})
    assert (s.protocol, s.mechanism, s.username, s.password, s.ssl_context) == \
        ("SASL_PLAINTEXT", "PLAIN", "u", "p", None)
    s = ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                        "ssl.ca.location": certs.ca, "sasl.jaas.config": JAAS})
    assert (s.username, s.password) == ("broker", "pw") and s.ssl_context.check_hostname


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "SASL_PLAINTEXT"}, "SASL needs sasl.username"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent"}, "cannot read"),
    ({"security.protocol": "KERBEROS"}, "unknown"),
])
def test_unusable_client_properties(props, message):
    with pytest.raises(ClientSecurityError, match=message):
        ClientSecurity.from_properties(props)


def test_java_client_keys_become_librdkafka_keys():
    out = librdkafka_properties({"security.protocol": "SASL_SSL", "sasl.jaas.config": JAAS,
                                 "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
                                 "ssl.keystore.type": "PEM", "ssl.keystore.location": "/me.pem"})
    assert out == {"security.protocol": "SASL_SSL", "sasl.username": "broker", "sasl.password": "pw",
                   "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/me.pem",
                   "ssl.key.location": "/me.pem"}
    mine = {"ssl.ca.location": "/a", "sasl.username": "x", "sasl.password": "y"}
    assert librdkafka_properties(mine) == mine


def test_inter_broker_security_from_the_broker_config(certs):
    cfg = configmod.BrokerConfig({
        "log.dirs": "/tmp/x", "listeners": "PLAINTEXT://:9092,INTERNAL://:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
        "ssl.key.password": KEY_PASSWORD})
    s = inter_broker(cfg)
    assert (s.protocol, s.mechanism, s.username, s.password) == ("SASL_SSL", "PLAIN", "broker", "pw")
    assert s.ssl_context is not None
    assert inter_broker(configmod.BrokerConfig({"log.dirs": "/tmp/x"})) is None
    no_user = configmod.BrokerConfig({
        "log.dirs": "/tmp/x", "listeners": "SASL_PLAINTEXT://:9093",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.jaas.config": 'x.PlainLoginModule required user_a="b";'})
    with pytest.raises(ClientSecurityError, match="needs username and password"):
        inter_broker(no_user)
