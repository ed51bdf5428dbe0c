"""Client quotas in ZooKeeper (issue #17), Kafka's layout (ZkConfigManager):

    /config/users/<user>                       {"version":1,"config":{"producer_byte_rate":"1024",...}}
    /config/clients/<client-id>                {"version":1,"config":{...}}
    /config/users/<user>/clients/<client-id>   {"version":1,"config":{...}}
    /config/changes/config_change_<seq>        {"version":2,"entity_path":"users/<user>/clients/<id>"}

`<default>` names the default entity; other names are sanitized as Kafka's Sanitizer
does (mpbroker/security/quotas.py `zk_path`). A user's config map is shared: SCRAM
credentials (`SCRAM-SHA-256`, ...) live in the same `/config/users/<user>` node, so a
write reads the map, replaces only the quota keys and writes it back conditionally on
the node's version (retried on a concurrent change): keys it does not own are kept.

Every broker's controller process watches `/config/changes` (a child watch, set by
`load`); a new notification reloads every quota entity (they are few) and the result
goes to its workers with the metadata. Notifications are not purged here (Kafka's
brokers delete those older than 15 minutes; a Kafka broker sharing the cluster does).
"""
from __future__ import annotations

import logging
from typing import Dict

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from mpbroker.controller import zkdata
from mpbroker.security import quotas as q

log = logging.getLogger(__name__)

CONFIG = "/config"
USERS = "/config/users"
CLIENTS = "/config/clients"
RETRIES = 10


async def _children(session, path: str, watch: bool = False) -> list:
    try:
        return await session.call(session.zk.get_children_async, path,
                                  session.watch if watch else None)
    except NoNodeError:
        return []


async def _quota_map(session, path: str) -> Dict[str, float]:
    try:
        data, _ = await session.call(session.zk.get_async, path)
        cfg = zkdata.parse_config(data, path)
    except NoNodeError:
        return {}
    except zkdata.ZkDataError as e:
        log.warning("%s", e)
        return {}
    out = {}
    for k, v in cfg.items():
        if k in q.QUOTA_KEYS:
            try:
                out[k] = float(v)
            except ValueError:
                log.warning("%s: quota %s=%r is not a number", path, k, v)
    return out


async def load(session) -> Dict[tuple, Dict[str, float]]:
    """Every quota entity in ZooKeeper; sets the child watch on /config/changes."""
    await _children(session, zkdata.CONFIG_CHANGES, watch=True)
    out: Dict[tuple, Dict[str, float]] = {}
    paths = [f"{CLIENTS}/{c}" for c in await _children(session, CLIENTS)]
    for u in await _children(session, USERS):
        paths.append(f"{USERS}/{u}")
        paths += [f"{USERS}/{u}/clients/{c}" for c in await _children(session, f"{USERS}/{u}/clients")]
    for path in paths:
        values = await _quota_map(session, path)
        if values:
            try:
                out[q.from_zk_path(path)] = values
            except q.QuotaError:
                continue
    return out


def _format(key: str, value: float) -> str:
    return str(int(round(value))) if q.QUOTA_KEYS.get(key) else repr(float(value))


async def write(session, quotas, changed) -> None:
    """Write each changed entity's quota keys into its config node (read-modify-write,
    other keys kept), then one /config/changes notification per entity."""
    for key in changed:
        rel = q.zk_path(key)
        path = f"{CONFIG}/{rel}"
        values = quotas.get(key, {})
        for _ in range(RETRIES):
            try:
                data, stat = await session.call(session.zk.get_async, path)
                cfg = zkdata.parse_config(data, path)
            except NoNodeError:
                cfg, stat = {}, None
            cfg = {k: v for k, v in cfg.items() if k not in q.QUOTA_KEYS}
            cfg.update({k: _format(k, v) for k, v in values.items()})
            try:
                if stat is None:
                    await session.call(session.zk.create_async, path, zkdata.config_json(cfg),
                                       makepath=True)
                else:
                    await session.call(session.zk.set_async, path, zkdata.config_json(cfg),
                                       stat.version)
                break
            except (BadVersionError, NodeExistsError):
                continue          # changed under us (a SCRAM credential): read it again
        else:
            raise RuntimeError(f"{path}: changed concurrently {RETRIES} times")
        await session.call(session.zk.create_async, f"{zkdata.CONFIG_CHANGES}/config_change_",
                           zkdata.config_change_json(rel), sequence=True, makepath=True)
