"""SCRAM users over ZooKeeper, served by any broker (as Kafka's ZkAdminManager):
AlterUserScramCredentials changes the SCRAM keys of `/config/users/<user>` (a
read-modify-write conditional on the znode's version, so the user's quota keys and a
concurrent change are kept), then writes a `/config/changes/config_change_<seq>`
notification (`{"version":2,"entity_path":"users/<user>"}`) as Kafka does. Every
broker's cache (`cache.py`) watches `/config/users` and each user's znode, so the new
credentials reach every broker's workers with the next metadata push. The checks are
mpbroker/metadata/scram_users.py's, against this broker's cache.
"""
from __future__ import annotations

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from mpbroker.controller import zkdata
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.session import ZkSession
from mpbroker.metadata import scram_users


class ZkScramUsers:
    def __init__(self, session: ZkSession, cache: ZnodeCache):
        self.session = session
        self.cache = cache

    def _call(self, name: str, *args, **kw):
        return self.session.call(getattr(self.session.zk, name), *args, **kw)

    async def describe(self, users):
        return scram_users.describe(self.cache.scram, users)

    async def alter(self, deletions, upsertions):
        await self.cache.load_scram_users()        # the newest, should a watch be late
        results, changes = scram_users.alter(self.cache.scram, deletions, upsertions)
        for user, user_changes in changes.items():
            await self._write(user, user_changes)
            await self._call("create_async", f"{zkdata.CONFIG_CHANGES}/config_change_",
                             zkdata.config_change_json(f"users/{zkdata.sanitize(user)}"),
                             sequence=True)
            await self.cache.load_scram_user(user)
        return results

    async def _write(self, user: str, user_changes) -> None:
        path = zkdata.user_config_path(user)
        while True:
            try:
                data, stat = await self._call("get_async", path)
            except NoNodeError:
                config = scram_users.merge_config({}, user_changes)
                try:
                    await self._call("create_async", path, zkdata.config_json(config), makepath=True)
                    return
                except NodeExistsError:
                    continue
            config = scram_users.merge_config(zkdata.parse_config(data, path), user_changes)
            try:
                await self._call("set_async", path, zkdata.config_json(config), version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue
