"""SCRAM users through the Admin API with confluent-kafka (KIP-554): alter and describe
users with no restart, Kafka's errors, users surviving a restart, and in ZooKeeper mode
a user added through one broker visible through another. Over PLAINTEXT: the login
itself is tests/security/test_scram_login.py's."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)
from confluent_kafka.error import KafkaException

from tests.cluster.conftest import cluster, zookeeper  # noqa: F401  (fixtures)
from tests.integration.broker import admin, run_cli, wait_until
from tests.integration.conftest import fresh_broker  # noqa: F401  (fixture)

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def upsert(user, password, mech=SHA256, iterations=4096):
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iterations),
                                        password.encode())


def alter(a, alterations):
    """{user: None or the KafkaException's error code}."""
    out = {}
    for user, fut in a.alter_user_scram_credentials(alterations).items():
        try:
            fut.result(30)
            out[user] = None
        except KafkaException as e:
            out[user] = e.args[0].code()
    return out


def describe(a, users=None):
    """{user: sorted [(mechanism name, iterations)]}; unknown users are errors."""
    got = a.describe_user_scram_credentials(users)
    # all users: one future of {user: description}; named users: {user: future}
    descs = got.result(30) if users is None else {u: f.result(30) for u, f in got.items()}
    return {u: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
            for u, d in descs.items()}


def test_users_are_managed_with_no_restart_and_survive_one(fresh_broker):
    b = fresh_broker()
    a = admin(b.bootstrap)
    assert alter(a, [upsert("alice", "alice-secret"), upsert("alice", "x", SHA512, 8192),
                     upsert("bob", "bob-secret", SHA512)]) == {"alice": None, "bob": None}
    assert describe(a) == {"alice": [("SCRAM_SHA_256", 4096), ("SCRAM_SHA_512", 8192)],
                           "bob": [("SCRAM_SHA_512", 4096)]}
    assert describe(a, ["bob"]) == {"bob": [("SCRAM_SHA_512", 4096)]}
    assert alter(a, [UserScramCredentialDeletion("alice", SHA512)]) == {"alice": None}
    b.restart()
    a = admin(b.bootstrap)
    assert describe(a) == {"alice": [("SCRAM_SHA_256", 4096)], "bob": [("SCRAM_SHA_512", 4096)]}
    assert alter(a, [UserScramCredentialDeletion("bob", SHA512)]) == {"bob": None}
    assert describe(a) == {"alice": [("SCRAM_SHA_256", 4096)]}


def test_a_user_added_offline_is_there_when_the_broker_starts(fresh_broker):
    b = fresh_broker()
    b.stop()
    r = run_cli("users", "add", "admin", "--password", "pw", "--mechanism", "SCRAM-SHA-512",
                "--offline", "-c", str(b.config_path))
    assert r.returncode == 0, r.stderr
    b.start()
    assert describe(admin(b.bootstrap)) == {"admin": [("SCRAM_SHA_512", 4096)]}
    r = run_cli("users", "add", "x", "--password", "pw", "--offline", "-c", str(b.config_path))
    assert r.returncode == 1 and b"is the broker running?" in r.stderr


def test_kafkas_errors(fresh_broker):
    from confluent_kafka import KafkaError
    b = fresh_broker()
    a = admin(b.bootstrap)
    assert alter(a, [UserScramCredentialDeletion("nobody", SHA256)]) == \
        {"nobody": KafkaError.RESOURCE_NOT_FOUND}
    assert alter(a, [upsert("weak", "pw", iterations=1000)]) == \
        {"weak": KafkaError.UNACCEPTABLE_CREDENTIAL}
    assert alter(a, [upsert("slow", "pw", iterations=16385)]) == \
        {"slow": KafkaError.UNACCEPTABLE_CREDENTIAL}
    assert alter(a, [upsert("twice", "a"), upsert("twice", "b")]) == \
        {"twice": KafkaError.DUPLICATE_RESOURCE}
    with pytest.raises(KafkaException) as e:
        describe(a, ["nobody"])
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    assert describe(a) == {}


def test_zookeeper_mode_a_user_added_through_one_broker_is_seen_through_another(cluster):  # noqa: F811
    c = cluster(2)
    a1, a2 = admin(c.brokers[1].bootstrap), admin(c.brokers[2].bootstrap)
    assert alter(a1, [upsert("carol", "carol-secret", SHA512)]) == {"carol": None}
    wait_until(lambda: describe(a2) == {"carol": [("SCRAM_SHA_512", 4096)]}, 10,
               "broker 2 sees carol")
    data, _ = c.zk_client().get("/config/users/carol")
    import json
    cfg = json.loads(data)
    assert cfg["version"] == 1 and cfg["config"]["SCRAM-SHA-512"].startswith("salt=")
    assert cfg["config"]["SCRAM-SHA-512"].endswith(",iterations=4096")
    assert any(json.loads(c.zk_client().get(f"/config/changes/{n}")[0]) ==
               {"version": 2, "entity_path": "users/carol"}
               for n in c.zk_client().get_children("/config/changes"))
    assert alter(a2, [UserScramCredentialDeletion("carol", SHA512)]) == {"carol": None}
    wait_until(lambda: describe(a1) == {}, 10, "broker 1 sees carol gone")
    c.restart(1)
    assert describe(admin(c.brokers[1].bootstrap)) == {}
