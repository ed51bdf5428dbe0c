"""SASL/PLAIN listeners with real clients (issue #17): confluent-kafka, kafka-python,
aiokafka and kcat over SASL_PLAINTEXT and SASL_SSL, the project's own client, and the
bad input: wrong password, unknown user, unknown mechanism (UNSUPPORTED_SASL_MECHANISM
with the enabled list), malformed and oversized tokens, a request before
authentication, the v0 handshake's bare tokens. Each is Kafka's error or a closed
connection, logged once without the password; the broker keeps serving and the data
stays. One broker per module (tests/security/conftest.py)."""
from __future__ import annotations

import asyncio
import shutil
import socket
import struct

import pytest

from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.client import ClientSecurity
from tests.security.conftest import (PASSWORDS, aiokafka_roundtrip, confluent_roundtrip,
                                     kafka_python_roundtrip, kafka_python_security, kcat)
from workers.kafka_client import AuthenticationError, KafkaConnection


def _plain(user: str, password: str, authzid: str = "") -> bytes:
    return b"\0".join(s.encode() for s in (authzid, user, password))


async def _connect(broker, listener="SASL_PLAINTEXT"):
    return await KafkaConnection.connect("127.0.0.1", broker.port_of(listener), timeout_ms=10000)


async def _closed(conn, timeout=10.0) -> bool:
    """The broker closed the connection (a request gets ConnectionError)."""
    try:
        await asyncio.wait_for(conn.request(api_keys.API_VERSIONS, 0, {}), timeout)
    except ConnectionError:
        return True
    return False


def test_confluent_over_sasl_plaintext_and_sasl_ssl(secure_broker):
    confluent_roundtrip(secure_broker.client_props("SASL_PLAINTEXT"), "sasl-plain")
    confluent_roundtrip(secure_broker.client_props("SASL_SSL", user="admin"), "sasl-ssl")
    assert {"User:alice", "User:admin"} <= secure_broker.principals()


def test_kafka_python_over_sasl_plaintext_and_sasl_ssl(secure_broker):
    kafka_python_roundtrip(kafka_python_security(secure_broker, "SASL_PLAINTEXT"), "kp-sasl")
    kafka_python_roundtrip(kafka_python_security(secure_broker, "SASL_SSL"), "kp-sasl-ssl")


def test_aiokafka_over_sasl_plaintext_and_sasl_ssl(secure_broker):
    aiokafka_roundtrip(secure_broker, "SASL_PLAINTEXT", "aio-sasl")
    aiokafka_roundtrip(secure_broker, "SASL_SSL", "aio-sasl-ssl")


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_sasl_ssl(secure_broker):
    lines = b"".join(b"s%d\n" % i for i in range(20))
    kcat(secure_broker, "SASL_SSL", "-P", "-t", "kcat-sasl", input=lines)
    out = kcat(secure_broker, "SASL_SSL", "-C", "-t", "kcat-sasl", "-o", "beginning", "-e").stdout
    assert out.split() == [b"s%d" % i for i in range(20)]


def test_the_project_client_authenticates_and_refuses_bad_credentials(secure_broker):
    async def run(user, password, listener="SASL_SSL"):
        sec = ClientSecurity.from_properties({
            "security.protocol": listener, "ssl.ca.location": secure_broker.certs.ca,
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password})
        conn = await KafkaConnection.connect("127.0.0.1", secure_broker.port_of(listener),
                                             timeout_ms=10000, security=sec)
        try:
            return await conn.request(api_keys.METADATA, 1, {"topics": None})
        finally:
            await conn.close()
    assert asyncio.run(run("alice", PASSWORDS["alice"]))["brokers"]
    assert asyncio.run(run("admin", PASSWORDS["admin"], "SASL_PLAINTEXT"))["brokers"]
    with pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED: Authentication "
                                                  "failed: Invalid username or password"):
        asyncio.run(run("alice", "not-her-password"))


@pytest.mark.parametrize("token, message", [
    (_plain("alice", "wrong-password"), "Invalid username or password"),
    (_plain("nobody", "whatever"), "Invalid username or password"),
    (b"no separators at all", "expected 3 tokens"),
    (_plain("alice", PASSWORDS["alice"], authzid="admin"), "authorization id"),
])
def test_failed_authentication_is_answered_then_the_connection_closes(secure_broker, token, message):
    async def run():
        conn = await _connect(secure_broker)
        hs = await conn.request(api_keys.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert hs["error_code"] == 0 and hs["mechanisms"] == ["PLAIN"]
        resp = await conn.request(api_keys.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert message in resp["error_message"]
        assert await _closed(conn)
    asyncio.run(run())
    log = secure_broker.log_tail(500000)
    assert "Failed authentication with 127.0.0.1" in log
    assert "wrong-password" not in log and PASSWORDS["alice"] not in log


def test_unknown_mechanism_gets_the_enabled_list_and_a_close(secure_broker):
    async def run():
        conn = await _connect(secure_broker)
        hs = await conn.request(api_keys.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-999"})
        assert hs["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert hs["mechanisms"] == ["PLAIN"]
        assert await _closed(conn)
    asyncio.run(run())


def test_a_request_before_authentication_closes_the_connection(secure_broker):
    async def run():
        conn = await _connect(secure_broker)
        assert (await conn.request(api_keys.API_VERSIONS, 0, {}))["error_code"] == 0
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(conn.request(api_keys.METADATA, 1, {"topics": None}), 10)
    asyncio.run(run())


def test_an_oversized_token_closes_the_connection(secure_broker):
    """sasl.server.max.receive.size (524288 by default)."""
    async def run():
        conn = await _connect(secure_broker)
        await conn.request(api_keys.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(conn.request(api_keys.SASL_AUTHENTICATE, 1,
                                                {"auth_bytes": b"\0" * 600000}), 10)
    asyncio.run(run())


def test_v0_handshake_then_bare_tokens(secure_broker):
    """KIP-43 v0: after SaslHandshake v0 the token is a bare length-prefixed frame, and so
    is the (empty) answer; then the connection serves like any other."""
    def frame(payload: bytes) -> bytes:
        return struct.pack(">i", len(payload)) + payload

    def read_frame(s) -> bytes:
        f = s.makefile("rb")
        head = f.read(4)
        assert len(head) == 4, "closed"
        return f.read(struct.unpack(">i", head)[0])

    with socket.create_connection(("127.0.0.1", secure_broker.port_of("SASL_PLAINTEXT")), 10) as s:
        s.settimeout(10)
        hs = struct.pack(">hhih", 17, 0, 1, 4) + b"test" + struct.pack(">h", 5) + b"PLAIN"
        s.sendall(frame(hs))
        body = read_frame(s)
        assert struct.unpack(">ih", body[:6]) == (1, 0)
        s.sendall(frame(_plain("alice", PASSWORDS["alice"])))
        assert read_frame(s) == b""
        api = struct.pack(">hhih", 18, 0, 2, 4) + b"test"
        s.sendall(frame(api))
        assert struct.unpack(">ih", read_frame(s)[:6]) == (2, 0)


def test_the_broker_survives_bad_input_and_keeps_the_data(secure_broker):
    """After the failures above (any order), the data produced over SASL is still there
    and the workers still serve; nothing was logged as a crash."""
    confluent_roundtrip(secure_broker.client_props("SASL_PLAINTEXT"), "sasl-after",
                        group="after-bad-input")
    assert secure_broker.is_alive()
    log = secure_broker.log_tail(1000000)
    assert "Traceback" not in log and "failed to boot" not in log


def test_kip368_session_lifetime_reauthentication_and_expiry(tmp_path, certs):
    """connections.max.reauth.ms: SaslAuthenticate v1 tells the lifetime; before it ends
    the client re-authenticates on the same connection; past it, any other request
    closes the connection."""
    import time

    from tests.security.conftest import SecureBroker
    b = SecureBroker(tmp_path / "b", certs, {"connections.max.reauth.ms": "1500"})
    b.start()

    async def authenticate(conn):
        assert (await conn.request(api_keys.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))["error_code"] == 0
        return await conn.request(api_keys.SASL_AUTHENTICATE, 1,
                                  {"auth_bytes": _plain("alice", PASSWORDS["alice"])})

    async def run():
        conn = await _connect(b)
        assert (await authenticate(conn))["session_lifetime_ms"] == 1500
        assert (await authenticate(conn))["error_code"] == 0           # re-authenticated
        assert (await conn.request(api_keys.METADATA, 1, {"topics": None}))["brokers"]
        deadline = time.monotonic() + 20          # until the session ends, the broker serves
        with pytest.raises(ConnectionError):
            while time.monotonic() < deadline:
                await asyncio.wait_for(conn.request(api_keys.METADATA, 1, {"topics": None}), 10)
                await asyncio.sleep(0.05)
        assert time.monotonic() < deadline
    try:
        asyncio.run(run())
    finally:
        b.stop()


def test_the_cli_works_against_sasl_ssl_with_a_java_style_command_config(secure_broker, tmp_path):
    """`--command-config` with the Java client's keys (sasl.jaas.config, a PEM trust
    store): confluent-kafka paths (topics list) and the own-client paths (log-dirs:
    DescribeLogDirs; cluster: ApiVersions per broker) both authenticate."""
    from tests.integration.broker import run_cli

    def props(password):
        path = tmp_path / f"client-{password}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={secure_broker.certs.ca}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="alice" password="{password}";\n')
        return path
    confluent_roundtrip(secure_broker.client_props("SASL_SSL"), "cli-sasl", n=5)
    good = props(PASSWORDS["alice"])
    for args in (("topics", "list"), ("log-dirs",), ("cluster",)):
        r = run_cli(*args, "--bootstrap-server", secure_broker.address("SASL_SSL"),
                    "--command-config", good, "--request-timeout-ms", 20000)
        assert r.returncode == 0, (args, r.stderr)
    out = run_cli("log-dirs", "--bootstrap-server", secure_broker.address("SASL_SSL"),
                  "--command-config", good).stdout.decode()
    assert "cli-sasl" in out
    r = run_cli("log-dirs", "--bootstrap-server", secure_broker.address("SASL_SSL"),
                "--command-config", props("nope"), "--request-timeout-ms", 10000)
    assert r.returncode != 0 and len(r.stderr.decode().strip().splitlines()) == 1
    assert "nope" not in r.stderr.decode()
