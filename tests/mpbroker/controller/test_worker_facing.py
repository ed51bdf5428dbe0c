"""Tests for mpbroker/controller/worker_facing.py: WorkerFacing, the worker-facing part
both controllers share: attached workers, the metadata view, and the broker config as
the static layer under the dynamic layers (kept across a SIGHUP reload)."""
import asyncio

from mpbroker import config as configmod
from mpbroker.config import ConfigSource
from mpbroker.controller import config_ops
from mpbroker.controller.worker_facing import WorkerFacing
from tests.mpbroker.controller.embedded_harness import Worker, make


class FakeDynamic:
    """Dynamic layers as `config_ops.DynamicBrokerConfigs.over` applies them; records each static layer."""

    def __init__(self, broker=None, default=None):
        self.broker, self.default, self.seen = broker or {}, default or {}, []

    def over(self, cfg):
        self.seen.append(cfg)
        return cfg.with_dynamic(broker=self.broker, default=self.default)


class Host(WorkerFacing):
    """What a controller sets before the mixin's methods are used."""

    def __init__(self, cfg, dynamic, md=None):
        self.workers, self.md, self.cfg, self.dynamic = [], md, cfg, dynamic
        self._broker_cfg = dynamic.over(cfg)


def static(**props):
    base = {"broker.id": "1", "log.dirs": "/d"}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return configmod.BrokerConfig(base, cpu_count=2, cwd="/cwd")


def alter_broker(ctl, name, key, value):
    out = asyncio.run(ctl.alter_configs([(config_ops.BROKER, name, [(key, config_ops.SET, value)])],
                                        True, False))
    assert out == [(config_ops.BROKER, name, 0, None)]


def test_reload_replaces_the_static_layer_and_reapplies_the_same_dynamic_layers():
    dyn = FakeDynamic(broker={"log.retention.ms": "1000"}, default={"log.cleaner.threads": "3"})
    h = Host(static(log_retention_ms="5", log_segment_bytes="1048576"), dyn)
    new = static(log_retention_ms="7", log_segment_bytes="2000000", num_io_threads="9")
    h.reload(new)
    assert h.cfg is new and dyn.seen[-1] is new and len(dyn.seen) == 2
    got = h.broker_config()
    assert got is not new                                         # a layered copy, not the static layer itself
    assert got["log.retention.ms"] == 1000 and got.source_of("log.retention.ms") == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert got["log.cleaner.threads"] == 3 \
        and got.source_of("log.cleaner.threads") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert got["log.segment.bytes"] == 2000000
    assert got.source_of("log.segment.bytes") == ConfigSource.STATIC_BROKER_CONFIG
    assert got["num.io.threads"] == 9
    assert new["log.retention.ms"] == 7                           # the static layer itself is untouched


def test_a_key_dropped_from_the_static_layer_falls_back_to_its_default_on_reload():
    h = Host(static(num_partitions="4"), FakeDynamic())
    assert h.broker_config()["num.partitions"] == 4
    h.reload(static())
    assert h.broker_config()["num.partitions"] == 1
    assert h.broker_config().source_of("num.partitions") == ConfigSource.DEFAULT_CONFIG


def test_attach_worker_keeps_workers_in_order_and_metadata_is_the_current_view():
    md1, md2 = object(), object()
    h = Host(static(), FakeDynamic(), md1)
    a, b = Worker(), Worker()
    h.attach_worker(a)
    h.attach_worker(b)
    assert h.workers == [a, b]
    assert h.metadata() is md1
    h.md = md2                                                   # the controller swaps its view on commit
    assert h.metadata() is md2


def test_embedded_controller_pushes_commits_to_attached_workers(tmp_path):
    ctl = make(tmp_path)
    w = Worker()
    ctl.attach_worker(w)
    assert w.md is None                                          # attaching pushes nothing by itself
    res = asyncio.run(ctl.create_topics([{"name": "t", "num_partitions": 2, "replication_factor": 1,
                                          "assignments": {}, "configs": []}], False, 0))
    assert res[0]["error_code"] == 0
    assert w.md is ctl.metadata() and "t" in w.md.topics


def test_embedded_reload_keeps_both_dynamic_layers_and_alter_after_reload_keeps_the_new_static(tmp_path):
    ctl = make(tmp_path)
    alter_broker(ctl, "1", "log.retention.ms", "1000")
    alter_broker(ctl, "", "log.cleaner.threads", "3")
    ctl.reload(configmod.BrokerConfig({**ctl.cfg.static, "log.retention.ms": "5",
                                       "log.cleaner.threads": "2", "log.segment.bytes": "2000000"}))
    got = ctl.broker_config()
    assert got["log.retention.ms"] == 1000 and got["log.cleaner.threads"] == 3
    assert got["log.segment.bytes"] == 2000000
    alter_broker(ctl, "1", "log.retention.ms", "2000")            # rebuilt over the reloaded static layer
    got = ctl.broker_config()
    assert got["log.retention.ms"] == 2000 and got["log.segment.bytes"] == 2000000
    assert got["log.cleaner.threads"] == 3
