"""SIGHUP reload rules (mpbroker/config_reload.py)."""
from __future__ import annotations

import logging

from mpbroker import config as configmod
from mpbroker.config_reload import apply_log_level, merge_reload
from tests.conftest import broker_config


def test_reload_applies_dynamic_keys_and_keeps_static_ones(tmp_path):
    old = broker_config(tmp_path, **{"log_retention_ms": 1000, "num_partitions": 1})
    new = broker_config(tmp_path, **{"log_retention_ms": 2000, "num_partitions": 5,
                                     "log_level": "DEBUG"})
    merged, needs_restart = merge_reload(old, new)
    assert merged["log.retention.ms"] == 2000
    assert merged.get("log.level") == "DEBUG"
    expected_static = [k for k in ("num.partitions",)
                       if not configmod.BROKER_CONFIGS[k].dynamic]
    for k in expected_static:
        assert merged[k] == old[k] and k in needs_restart


def test_apply_log_level_sets_the_root_level(tmp_path):
    root = logging.getLogger()
    before = root.level
    try:
        apply_log_level(broker_config(tmp_path, log_level="debug"))
        assert root.level == logging.DEBUG
        apply_log_level(broker_config(tmp_path, log_level="WARN"))
        assert root.level == logging.WARNING
    finally:
        root.setLevel(before)
