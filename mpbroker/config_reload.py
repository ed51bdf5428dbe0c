"""SIGHUP config reload rules (ARCHITECTURE §1): which keys of a re-read config file
take effect in a running broker, and the log level every process applies.

The supervisor re-reads the file and merges it (`merge_reload`); it sends the merged
config to the controller and the workers over their control channels, and each process
applies `log.level` with `apply_log_level`.
"""
from __future__ import annotations

import logging

from mpbroker import config as configmod


def apply_log_level(cfg) -> None:
    """`log.level` of `cfg` on this process's root logger (an unknown name: unchanged)."""
    level = getattr(logging, str(cfg["log.level"]).upper(), None)
    if isinstance(level, int):
        logging.getLogger().setLevel(level)


def merge_reload(current, new):
    """SIGHUP: the config to run with, and the changed keys that need a restart.

    Dynamic keys (those AlterConfigs may change) and `log.level` take their new value;
    other changed keys keep the running value until a restart."""
    applied = dict(current.static)
    needs_restart = []
    for key in sorted(set(current.static) | set(new.static)):
        old_v, new_v = current.static.get(key), new.static.get(key)
        if old_v == new_v:
            continue
        spec = configmod.BROKER_CONFIGS.get(key)
        if spec is None and not key.startswith(configmod.PLACEMENT_PREFIX):
            continue        # unknown (warned about by the caller) or ignored: nothing to restart
        if key == "log.level" or (spec is not None and spec.dynamic):
            if new_v is None:
                applied.pop(key, None)
            else:
                applied[key] = new_v
        else:
            needs_restart.append(key)
    merged = configmod.BrokerConfig(applied, dynamic_broker=current.dynamic_broker,
                                    dynamic_default=current.dynamic_default,
                                    cpu_count=current._cpu_count, cwd=current._cwd)
    return merged, needs_restart
