"""SCRAM-SHA-256 / SCRAM-SHA-512 logins on a SASL_PLAINTEXT listener with every client:
confluent-kafka, kafka-python, aiokafka and kcat produce and consume; a wrong password
is SASL_AUTHENTICATION_FAILED; a user added with no restart logs in, a removed one no
longer does.

The broker has a PLAINTEXT listener (the harness's port: readiness, and the users are
added through it, the bootstrap path README describes) and a SASL_PLAINTEXT one with
Kafka's keys. The SASL handshake is the listeners' part of issue 17: these tests skip
while `workers.handlers.sasl_handshake` does not exist.
"""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid

import pytest

pytest.importorskip("workers.handlers.sasl_handshake")

from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism,  # noqa: E402
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

from tests.integration.broker import (admin, consumer, create_topic, free_port,  # noqa: E402
                                      producer, wait_until)
from tests.integration.conftest import fresh_broker  # noqa: E402,F401  (fixture)

MECHS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture
def secured(fresh_broker):  # noqa: F811
    """-> (plaintext bootstrap, sasl bootstrap) of a broker with both listeners."""
    sasl_port, plain_port = free_port(), free_port()
    b = fresh_broker({
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
                                f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": ",".join(MECHS),
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": JAAS,
    }, port=plain_port)
    return b.bootstrap, f"127.0.0.1:{sasl_port}"


def add_user(plain, user, password):
    a = admin(plain)
    for fut in a.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism[m.replace("-", "_")],
                                                                   4096), password.encode())
            for m in MECHS]).values():
        fut.result(30)


def remove_user(plain, user):
    a = admin(plain)
    for fut in a.alter_user_scram_credentials([
            UserScramCredentialDeletion(user, ScramMechanism[m.replace("-", "_")])
            for m in MECHS]).values():
        fut.result(30)


def sasl_conf(mech, user, password):
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mech,
            "sasl.username": user, "sasl.password": password}


def confluent_login_error(sasl, mech, user, password):
    """None when a confluent-kafka client logs in (Metadata answered), else
    KafkaError._AUTHENTICATION when librdkafka reported an authentication failure (the
    broker's SASL_AUTHENTICATION_FAILED), else the error codes it reported."""
    errors = []
    a = admin(sasl, **sasl_conf(mech, user, password), error_cb=errors.append)
    try:
        a.list_topics(timeout=10)
        return None
    except Exception:
        # error_cb runs from poll(): serve the callbacks librdkafka queued (at most 5 s)
        for _ in range(25):
            a.poll(0.2)
            if errors:
                break
        codes = [e.code() for e in errors]
        return KafkaError._AUTHENTICATION if KafkaError._AUTHENTICATION in codes else codes


@pytest.mark.parametrize("mech", MECHS)
def test_confluent_kafka_produces_and_consumes(secured, mech):
    plain, sasl = secured
    add_user(plain, "alice", "alice-secret")
    topic = create_topic(plain, f"scram-{uuid.uuid4().hex[:8]}")
    conf = sasl_conf(mech, "alice", "alice-secret")
    p = producer(sasl, **conf)
    p.produce(topic, b"hello")
    assert p.flush(30) == 0
    c = consumer(sasl, **conf)
    from confluent_kafka import TopicPartition
    c.assign([TopicPartition(topic, 0, 0)])
    msg = wait_until(lambda: c.poll(1.0), 30, "the record")
    assert msg.error() is None and msg.value() == b"hello"
    c.close()


@pytest.mark.parametrize("mech", MECHS)
def test_wrong_password_and_unknown_user_fail(secured, mech):
    plain, sasl = secured
    add_user(plain, "alice", "alice-secret")
    assert confluent_login_error(sasl, mech, "alice", "wrong") == KafkaError._AUTHENTICATION
    assert confluent_login_error(sasl, mech, "mallory", "x") == KafkaError._AUTHENTICATION


def test_users_added_and_removed_with_no_restart(secured):
    plain, sasl = secured
    assert confluent_login_error(sasl, "SCRAM-SHA-256", "bob", "bob-pw") is not None
    add_user(plain, "bob", "bob-pw")
    wait_until(lambda: confluent_login_error(sasl, "SCRAM-SHA-256", "bob", "bob-pw") is None, 10,
               "bob logs in")
    remove_user(plain, "bob")
    wait_until(lambda: confluent_login_error(sasl, "SCRAM-SHA-512", "bob", "bob-pw") is not None, 10,
               "bob is refused")


def python_client_setup(secured, mech, user):
    """`user` added (password "<user>-pw"), a new topic -> (topic, kafka-python/aiokafka kwargs)."""
    plain, sasl = secured
    add_user(plain, user, f"{user}-pw")
    topic = create_topic(plain, f"scram-{user}-{uuid.uuid4().hex[:8]}")
    return topic, dict(bootstrap_servers=sasl, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism=mech, sasl_plain_username=user,
                       sasl_plain_password=f"{user}-pw")


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python(secured, mech):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError as KpError
    topic, kw = python_client_setup(secured, mech, "carol")
    p = KafkaProducer(**kw)
    p.send(topic, b"kp").get(30)
    p.close()
    c = KafkaConsumer(**kw, enable_auto_commit=False, consumer_timeout_ms=15000)
    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    assert next(iter(c)).value == b"kp"
    c.close()
    with pytest.raises(KpError):
        KafkaProducer(**{**kw, "sasl_plain_password": "wrong"}, max_block_ms=5000).send(topic, b"x").get(10)


@pytest.mark.parametrize("mech", MECHS)
def test_aiokafka(secured, mech):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError as AioError
    topic, kw = python_client_setup(secured, mech, "dave")

    async def run():
        p = AIOKafkaProducer(**kw)
        await p.start()
        await p.send_and_wait(topic, b"aio")
        await p.stop()
        c = AIOKafkaConsumer(**kw, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        c.assign([TopicPartition(topic, 0)])
        msg = await asyncio.wait_for(c.getone(), 20)
        await c.stop()
        assert msg.value == b"aio"
        bad = AIOKafkaProducer(**{**kw, "sasl_plain_password": "wrong"})
        with pytest.raises(AioError):
            await bad.start()
        await bad.stop()
    asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("mech", MECHS)
def test_kcat(secured, mech):
    plain, sasl = secured
    add_user(plain, "erin", "erin-pw")
    topic = create_topic(plain, f"scram-kcat-{uuid.uuid4().hex[:8]}")

    def kcat(*args, password="erin-pw", input=None):
        return subprocess.run(["kcat", "-b", sasl, "-m", "15", "-X", "broker.address.family=v4",
                               "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mech}",
                               "-X", "sasl.username=erin", "-X", f"sasl.password={password}", *args],
                              input=input, capture_output=True, timeout=60)
    assert kcat("-P", "-t", topic, input=b"kc\n").returncode == 0
    out = kcat("-C", "-t", topic, "-o", "beginning", "-e", "-f", "%s\n")
    assert out.returncode == 0 and out.stdout == b"kc\n"
    bad = kcat("-L", password="wrong")
    assert bad.returncode != 0
