"""Shared fixtures of the security integration tests (issue #17): certificates made
with `cryptography` (a CA, a server certificate for 127.0.0.1/localhost, client
certificates, an untrusted CA's client certificate, an expired one) and a broker with
every kind of listener:

    PLAINTEXT  (the readiness port)      SSL     (ssl.client.auth=requested)
    MTLS       (SSL, client auth required, KIP-371 mapping rules)
    SASL_PLAINTEXT (PLAIN)               SASL_SSL (PLAIN)

Users: alice/alice-secret, admin/admin-secret. `SecureBroker.port_of(name)` gives a
listener's port; `client_props(listener, ...)` librdkafka properties for it;
`principals()` the principals the broker logged (log.requests) so far.
"""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from mpbroker.testing import MpBroker, free_port
from tests.security.certs import KEY_PASSWORD, Certs

PASSWORDS = {"alice": "alice-secret", "admin": "admin-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
MAPPING_RULES = "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"


LISTENERS = ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")


class SecureBroker(MpBroker):
    """A broker with every listener kind (see the module docstring)."""

    def __init__(self, workdir: Path, certs: Certs, extra: dict | None = None):
        self.ports = {name: free_port() for name in LISTENERS[1:]}
        self.certs = certs
        overrides = {
            "listeners": ",".join(f"{n}://127.0.0.1:{{{n}}}" for n in LISTENERS),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca,
            "ssl.client.auth": "requested",
            "listener.name.mtls.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": MAPPING_RULES,
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "sasl.jaas.config": JAAS,           # SASL_SSL: the fallback
            "connection.failed.authentication.delay.ms": "50",
            "log.requests": "true", **(extra or {})}
        super().__init__(workdir, overrides)
        self.overrides["listeners"] = self.overrides["listeners"].format(
            PLAINTEXT=self.port, **self.ports)

    def port_of(self, name: str) -> int:
        return self.ports[name] if name in self.ports else self.port

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.port_of(name)}"

    def principals(self) -> set:
        return set(re.findall(r"principal=(\S+)", self.log_path.read_text(errors="replace")))

    def client_props(self, listener: str, user: str | None = "alice", password: str | None = None,
                     cert: str | None = None, mechanism: str = "PLAIN") -> dict:
        """librdkafka (confluent-kafka, kcat) properties for `listener`."""
        protocol = {"MTLS": "SSL"}.get(listener, listener)
        props = {"bootstrap.servers": self.address(listener), "security.protocol": protocol}
        if "SSL" in protocol:
            props["ssl.ca.location"] = self.certs.ca
            if cert:
                props["ssl.certificate.location"] = self.certs.crt(cert)
                props["ssl.key.location"] = self.certs.key(cert)
        if protocol.startswith("SASL"):
            props.update({"sasl.mechanism": mechanism, "sasl.username": user,
                          "sasl.password": password if password is not None else PASSWORDS.get(user, "x")})
        return props


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, certs):
    b = SecureBroker(tmp_path_factory.mktemp("secure-broker"), certs)
    b.start()
    yield b
    b.stop()


def confluent_roundtrip(props: dict, topic: str, n: int = 20, group: str | None = None) -> list:
    """Produce n records with confluent-kafka over `props`, consume them back (values)."""
    import confluent_kafka as ck
    p = ck.Producer({**props, "linger.ms": 5})
    values = [f"{topic}-{i}".encode() for i in range(n)]
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    c = ck.Consumer({**props, "group.id": group or f"g-{topic}", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    got: list = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert sorted(got) == sorted(values)      # in order per partition; topics may have several
    return got


def kafka_python_security(broker: SecureBroker, listener: str, cert: str | None = None,
                          user: str = "alice") -> dict:
    """kafka-python's keyword arguments for `listener`."""
    protocol = {"MTLS": "SSL"}.get(listener, listener)
    kw = {"bootstrap_servers": broker.address(listener), "security_protocol": protocol}
    if "SSL" in protocol:
        kw.update(ssl_cafile=broker.certs.ca, ssl_check_hostname=True)
        if cert:
            kw.update(ssl_certfile=broker.certs.crt(cert), ssl_keyfile=broker.certs.key(cert))
    if protocol.startswith("SASL"):
        kw.update(sasl_mechanism="PLAIN", sasl_plain_username=user,
                  sasl_plain_password=PASSWORDS[user])
    return kw


def kafka_python_roundtrip(kw: dict, topic: str, n: int = 10) -> None:
    import kafka
    p = kafka.KafkaProducer(**kw)
    values = [f"{topic}-{i}".encode() for i in range(n)]
    for v in values:
        p.send(topic, v)
    p.flush(30)
    p.close()
    c = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000,
                            enable_auto_commit=False, **kw)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == n:
            break
    c.close()
    assert got == values


def aiokafka_roundtrip(broker: SecureBroker, listener: str, topic: str, cert: str | None = None,
                       user: str = "alice", n: int = 10) -> None:
    import asyncio

    import aiokafka
    from aiokafka.helpers import create_ssl_context
    protocol = {"MTLS": "SSL"}.get(listener, listener)
    kw = {"bootstrap_servers": broker.address(listener), "security_protocol": protocol}
    if "SSL" in protocol:
        kw["ssl_context"] = create_ssl_context(
            cafile=broker.certs.ca, certfile=broker.certs.crt(cert) if cert else None,
            keyfile=broker.certs.key(cert) if cert else None)
    if protocol.startswith("SASL"):
        kw.update(sasl_mechanism="PLAIN", sasl_plain_username=user,
                  sasl_plain_password=PASSWORDS[user])
    values = [f"{topic}-{i}".encode() for i in range(n)]

    async def run():
        p = aiokafka.AIOKafkaProducer(**kw)
        await p.start()
        try:
            for v in values:
                await p.send_and_wait(topic, v)
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **kw)
        await c.start()
        got = []
        try:
            while len(got) < n:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
        finally:
            await c.stop()
        return got
    assert asyncio.run(run()) == values


def kcat(broker: SecureBroker, listener: str, *args, input: bytes | None = None,
         cert: str | None = None, check: bool = True):
    props = broker.client_props(listener, cert=cert)
    cmd = ["kcat", "-m", "15", "-X", "broker.address.family=v4", "-b", props.pop("bootstrap.servers")]
    for k, v in props.items():
        cmd += ["-X", f"{k}={v}"]
    proc = subprocess.run([*cmd, *args], input=input, capture_output=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"kcat exited {proc.returncode}: {proc.stderr[-3000:]!r}")
    return proc
