"""Tests for mpbroker.ignored_configs: which Kafka keys mpbroker accepts and ignores."""
import pytest

from mpbroker.config import BROKER_CONFIGS
from mpbroker.ignored_configs import IGNORED_KEYS, IGNORED_PREFIXES, is_ignored


@pytest.mark.parametrize("name", [
    "advertised.host.name",                 # a listed key
    "bootstrap.servers",                    # a client key copied into a broker file
    "sasl.kerberos.service.name",           # the families: TLS/SASL, KRaft, tiered storage
    "controller.quorum.voters",
    "remote.log.storage.system.enable",
    "metric.reporters",
])
def test_listed_keys_and_families_are_ignored(name):
    assert is_ignored(name)


@pytest.mark.parametrize("name", [
    "log.dirz",                              # a typo stays a typo
    "advertised.host.nam",                  # keys match whole, not by prefix
    "xssl.keystore.location",               # a family matches at the start only
    "log.retention.ms",
])
def test_other_keys_are_not_ignored(name):
    assert not is_ignored(name)


def test_the_lists_are_of_real_key_shapes():
    assert all(p.endswith(".") or "." in p for p in IGNORED_PREFIXES)
    assert all(k == k.strip() and " " not in k for k in IGNORED_KEYS)


def test_no_listed_key_is_one_mpbroker_defines():
    # a defined key is never ignored (BrokerConfig asks BROKER_CONFIGS first); the
    # exact list must not name one, or its entry would be dead
    assert not IGNORED_KEYS & set(BROKER_CONFIGS)
