"""TLS listeners with real clients (issue #17): confluent-kafka, kafka-python, aiokafka
and kcat over SSL with and without client certificates, mTLS with KIP-371 principal
mapping, Metadata answering each listener's own endpoint, and the bad input: plaintext
spoken to the TLS port, TLS spoken to the plaintext port, untrusted, expired and
missing client certificates on a `required` listener, a bad TLS config at start. One
broker per module (tests/security/conftest.py)."""
from __future__ import annotations

import shutil
import socket
import ssl

import pytest

from mpbroker.testing import BrokerStartError, api_versions_answered
from tests.security.certs import KEY_PASSWORD
from tests.security.conftest import (SecureBroker, aiokafka_roundtrip,
                                     confluent_roundtrip, kafka_python_roundtrip,
                                     kafka_python_security, kcat)

def _tls_client(broker, listener: str, cert: str | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=broker.certs.ca)
    if cert:
        ctx.load_cert_chain(broker.certs.crt(cert), broker.certs.key(cert))
    raw = socket.create_connection(("127.0.0.1", broker.port_of(listener)), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def test_confluent_over_ssl_without_and_with_a_client_certificate(secure_broker):
    confluent_roundtrip(secure_broker.client_props("SSL"), "tls-anon")
    confluent_roundtrip(secure_broker.client_props("SSL", cert="alice"), "tls-cert")


def test_mtls_maps_the_certificate_dn_to_the_principal(secure_broker):
    """ssl.principal.mapping.rules: CN=Alice,OU=eng,O=acme -> User:alice (lower-cased)."""
    confluent_roundtrip(secure_broker.client_props("MTLS", cert="alice"), "mtls")
    assert "User:alice" in secure_broker.principals()


def test_kafka_python_over_ssl_and_mtls(secure_broker):
    kafka_python_roundtrip(kafka_python_security(secure_broker, "SSL"), "kp-tls")
    kafka_python_roundtrip(kafka_python_security(secure_broker, "MTLS", cert="alice"), "kp-mtls")


def test_aiokafka_over_ssl_and_mtls(secure_broker):
    aiokafka_roundtrip(secure_broker, "SSL", "aio-tls")
    aiokafka_roundtrip(secure_broker, "MTLS", "aio-mtls", cert="alice")


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_mtls(secure_broker):
    lines = b"".join(b"v%d\n" % i for i in range(20))
    kcat(secure_broker, "MTLS", "-P", "-t", "kcat-tls", cert="alice", input=lines)
    out = kcat(secure_broker, "MTLS", "-C", "-t", "kcat-tls", "-o", "beginning", "-e",
               cert="alice").stdout
    assert out.split() == [b"v%d" % i for i in range(20)]


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"])
def test_metadata_answers_the_endpoint_of_the_listener_connected_to(secure_broker, listener):
    from confluent_kafka.admin import AdminClient
    cert = "alice" if listener == "MTLS" else None
    md = AdminClient(secure_broker.client_props(listener, cert=cert)).list_topics(timeout=20)
    assert [(b.host, b.port) for b in md.brokers.values()] == \
        [("127.0.0.1", secure_broker.port_of(listener))]


@pytest.mark.parametrize("cert", [None, "mallory", "expired"])
def test_mtls_refuses_missing_untrusted_and_expired_certificates(secure_broker, cert):
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with _tls_client(secure_broker, "MTLS", cert) as s:
            # TLS 1.3: the server's verdict on the certificate arrives after the handshake
            if not api_versions_answered(s):
                raise ConnectionError("closed")
    with _tls_client(secure_broker, "MTLS", "alice") as s:      # the listener still serves
        assert api_versions_answered(s)


def test_plaintext_to_the_tls_port_and_tls_to_the_plaintext_port_are_closed(secure_broker):
    with socket.create_connection(("127.0.0.1", secure_broker.port_of("SSL")), timeout=10) as s:
        assert not api_versions_answered(s)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _tls_client(secure_broker, "PLAINTEXT").close()
    with socket.create_connection(("127.0.0.1", secure_broker.port), timeout=10) as s:
        assert api_versions_answered(s)
    with _tls_client(secure_broker, "SSL") as s:
        assert api_versions_answered(s)
    log = secure_broker.log_tail(200000)
    assert "SSL handshake failed" in log
    assert "Traceback" not in log


def test_the_project_client_speaks_tls(secure_broker):
    """workers/kafka_client.py with ClientSecurity (the CLI's own-client path and the
    broker's inter-broker connections)."""
    import asyncio

    from mpbroker.security.client import ClientSecurity
    from workers.kafka_client import KafkaConnection
    sec = ClientSecurity.from_properties({"security.protocol": "SSL",
                                          "ssl.ca.location": secure_broker.certs.ca,
                                          "ssl.certificate.location": secure_broker.certs.crt("alice"),
                                          "ssl.key.location": secure_broker.certs.key("alice")})

    async def run():
        conn = await KafkaConnection.connect("127.0.0.1", secure_broker.port_of("MTLS"),
                                             timeout_ms=10000, security=sec)
        try:
            return await conn.api_versions()
        finally:
            await conn.close()
    assert 18 in asyncio.run(run())


@pytest.mark.parametrize("change, message", [
    ({"ssl.key.password": "wrong"}, "wrong ssl.key.password"),
    ({"ssl.keystore.location": "/nonexistent/server.pem"}, "cannot read"),
    ({"listener.name.mtls.ssl.truststore.location": "/nonexistent/ca.pem"}, "cannot read"),
])
def test_a_bad_tls_config_exits_2_with_one_line(tmp_path, certs, change, message):
    b = SecureBroker(tmp_path / "b", certs, change)
    with pytest.raises(BrokerStartError) as e:
        b.start()
    assert "exited with code 2" in str(e.value)
    lines = [ln for ln in b.log_tail().splitlines() if ln.startswith("mpbroker:")]
    assert len(lines) == 1 and message in lines[0], b.log_tail()
    assert KEY_PASSWORD not in b.log_tail() and "wrong" not in lines[0].split("password")[-1]


def test_a_pkcs12_keystore_serves(tmp_path, certs):
    b = SecureBroker(tmp_path / "b", certs, {"ssl.keystore.type": "PKCS12",
                                              "ssl.keystore.location": certs.server_p12,
                                              "ssl.keystore.password": "store-pass"})
    b.start()
    try:
        with _tls_client(b, "SSL") as s:
            assert api_versions_answered(s)
    finally:
        b.stop()


def test_every_worker_serves_every_listener(tmp_path, certs):
    """Two workers: each listens on every listener (SO_REUSEPORT per listener), and a
    partition owned by the other worker is served through the front's TLS/SASL
    connection (its parts forwarded with the principal)."""
    b = SecureBroker(tmp_path / "b", certs, {"num.workers": "2", "num.partitions": "4"})
    b.start()
    try:
        confluent_roundtrip(b.client_props("SASL_SSL"), "two-workers", n=40)
        confluent_roundtrip(b.client_props("MTLS", cert="alice"), "two-workers-mtls", n=40)
        log = b.log_tail(1000000)
        assert "worker 0 (pid" in log and "worker 1 (pid" in log
        assert {"User:alice"} <= b.principals() and "Traceback" not in log
    finally:
        b.stop()
