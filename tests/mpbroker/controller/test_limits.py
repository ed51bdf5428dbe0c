"""The controllers' mutation limits: the file descriptor ceiling and the caps it lowers."""
from mpbroker import config as configmod
from mpbroker.controller import limits


def test_fd_ceiling_binds_only_when_lower(monkeypatch):
    cfg = configmod.BrokerConfig({"broker.id": "1", "log.dirs": "/tmp/unused",
                                  "listeners": "PLAINTEXT://127.0.0.1:0",
                                  "max.broker.partitions": "100"})
    monkeypatch.setattr(limits, "fd_ceiling", lambda workers: (40, "the fd note"))
    caps = limits.MutationLimits(cfg).partitions(cfg)
    assert (caps.max_broker_partitions, caps.broker_limit_source) == (40, "the fd note")
    monkeypatch.setattr(limits, "fd_ceiling", lambda workers: (400, "the fd note"))
    assert limits.MutationLimits(cfg).partitions(cfg).max_broker_partitions == 100
