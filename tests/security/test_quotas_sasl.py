"""User-entity client quotas (KIP-55) over SASL/PLAIN (issue #17): the principal's name
is the quota's user; a user quota throttles that user's producer whatever its client
id, a <user, client-id> quota is more specific than the user's, and another user is not
throttled. Runs once SASL is in the broker (skipped while workers.handlers.sasl_handshake
is missing). The quotas are set on the PLAINTEXT listener (no ACLs here)."""
from __future__ import annotations

import pytest

pytest.importorskip("workers.handlers.sasl_handshake")
pytest.importorskip("confluent_kafka")

from tests.integration.broker import Broker, free_port            # noqa: E402
from tests.security.test_quotas import QUOTA, WINDOW, alter, describe  # noqa: E402

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")


@pytest.fixture
def sasl_broker(tmp_path):
    port, sasl_port = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    b = Broker(tmp_path / "b", {**WINDOW, "listeners": listeners, "advertised.listeners": listeners,
                                "sasl.enabled.mechanisms": "PLAIN",
                                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS},
               name="quota-sasl-broker", port=port)
    b.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    b.start()
    yield b
    b.stop(timeout=20) if b.is_alive() else b.kill()


def produce_as(b, user: str, client_id: str, n: int = 300) -> list:
    from confluent_kafka import Producer
    events = []
    p = Producer({"bootstrap.servers": b.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": user,
                  "sasl.password": PASSWORDS[user], "client.id": client_id, "linger.ms": 20,
                  "throttle_cb": lambda e: events.append(e.throttle_time)})
    for _ in range(n):
        p.produce("sasl-quota", b"s" * 1000)
        p.poll(0)
    assert p.flush(60) == 0
    p.poll(0.5)
    return events


def test_user_quota_throttles_that_user_only(sasl_broker):
    b = sasl_broker
    alter(b, [("user", "alice")], {"producer_byte_rate": QUOTA})
    alter(b, [("user", "alice"), ("client-id", "special")], {"producer_byte_rate": 10 ** 9})
    assert describe(b, [("user", 0, "alice")], strict=True) == {
        (("user", "alice"),): {"producer_byte_rate": QUOTA}}
    events = produce_as(b, "alice", "any-client")
    assert events and max(events) > 0
    assert not any(produce_as(b, "bob", "any-client"))
    assert not any(produce_as(b, "alice", "special"))       # <user, client-id> wins
