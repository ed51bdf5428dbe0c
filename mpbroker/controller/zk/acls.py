"""ACLs in ZooKeeper, where Kafka's ZK-mode AclAuthorizer keeps them (issue #17).

    /kafka-acl/<ResourceType>/<name>                        LITERAL ACLs of a resource
    /kafka-acl-extended/prefixed/<ResourceType>/<name>      PREFIXED ACLs of a resource
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                    "Topic:orders" (LITERAL)
    /kafka-acl-extended-changes/acl_changes_<seq>           {"version":1,"resourceType":"Topic",
                                                             "name":"orders-","patternType":"PREFIXED"}

Any broker writes (as Kafka's brokers do through their authorizer): each changed
resource's znode (a conditional set on its version, retried; deleted once empty), then
a change notification (the newest KEEP_CHANGES are kept). Every broker's controller process watches both change paths;
on a change it reads the ACL tree again (`load`) and publishes it with the metadata to
its workers (`ZnodeCache.acls`), so every broker and worker sees it within a second.
The resource type and operation names are Kafka's (mpbroker/security/acl.py).
"""
from __future__ import annotations

import json
import logging

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from mpbroker.controller import acl_ops
from mpbroker.security.acl import (LITERAL, OP_BY_NAME, OP_NAMES, PERM_BY_NAME, PERM_NAMES,
                                   PREFIXED, TYPE_BY_NAME, TYPE_NAMES, AclBinding)

log = logging.getLogger(__name__)

ACL_ROOT = {LITERAL: "/kafka-acl", PREFIXED: "/kafka-acl-extended/prefixed"}
CHANGES = {LITERAL: "/kafka-acl-changes", PREFIXED: "/kafka-acl-extended-changes"}
CHANGE_PATHS = frozenset(CHANGES.values())
CHANGE_PREFIX = "acl_changes_"
KEEP_CHANGES = 100      # notifications kept per change path (Kafka expires them after 15 min)


def resource_path(b: AclBinding) -> str:
    return f"{ACL_ROOT[b.pattern_type]}/{TYPE_NAMES[b.resource_type]}/{b.name}"


def acls_json(bindings) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": b.principal, "permissionType": PERM_NAMES[b.permission],
         "operation": OP_NAMES[b.operation], "host": b.host} for b in sorted(bindings)]},
        separators=(",", ":")).encode()


def parse_acls(data: bytes, rtype: int, name: str, pattern: int) -> list:
    d = json.loads(data or b"{}")
    return [AclBinding(rtype, name, pattern, a["principal"], a["host"],
                       OP_BY_NAME[a["operation"].lower()], PERM_BY_NAME[a["permissionType"].lower()])
            for a in d.get("acls", ())]


def change_json(b: AclBinding) -> bytes:
    if b.pattern_type == LITERAL:
        return f"{TYPE_NAMES[b.resource_type]}:{b.name}".encode()
    return json.dumps({"version": 1, "resourceType": TYPE_NAMES[b.resource_type], "name": b.name,
                       "patternType": "PREFIXED"}, separators=(",", ":")).encode()


class ZkAcls:
    """Reads and writes the ACL tree; `cache` (ZnodeCache) holds what was read."""

    def __init__(self, session, cache):
        self.session = session
        self.cache = cache

    def _call(self, name: str, *args, **kw):
        return self.session.call(getattr(self.session.zk, name), *args, **kw)

    async def ensure_paths(self) -> None:
        for path in (*ACL_ROOT.values(), *CHANGES.values()):
            await self._call("ensure_path_async", path)

    async def load(self) -> None:
        """Read every ACL and watch the change paths again (one-shot watches)."""
        await self.ensure_paths()
        for path in CHANGES.values():
            await self._call("get_children_async", path, self.session.watch)
        acls = []
        for pattern, root in ACL_ROOT.items():
            for tname in await self._call("get_children_async", root):
                rtype = TYPE_BY_NAME.get(tname.lower())
                if rtype is None:
                    continue
                for name in await self._call("get_children_async", f"{root}/{tname}"):
                    try:
                        data, _ = await self._call("get_async", f"{root}/{tname}/{name}")
                        acls += parse_acls(data, rtype, name, pattern)
                    except NoNodeError:
                        continue
                    except (ValueError, KeyError) as e:
                        log.warning("ACLs of %s/%s/%s unreadable: %s", root, tname, name, e)
        acls = tuple(sorted(set(acls)))
        if acls != self.cache.acls:
            self.cache.acls = acls
            self.cache.acl_version += 1

    async def create_acls(self, bindings):
        await self.load()
        acls, results = acl_ops.create_acls(self.cache.acls, bindings)
        await self._write(set(self.cache.acls), set(acls))
        return results

    async def delete_acls(self, filters):
        await self.load()
        acls, results = acl_ops.delete_acls(self.cache.acls, filters)
        await self._write(set(self.cache.acls), set(acls))
        return results

    async def _write(self, old: set, new: set) -> None:
        added, removed = new - old, old - new
        resources = {(b.resource_type, b.name, b.pattern_type): b for b in added | removed}
        for key, b in sorted(resources.items()):
            await self._update(b, [a for a in added if a[:3] == key], [a for a in removed if a[:3] == key])
            await self._call("create_async", f"{CHANGES[b.pattern_type]}/{CHANGE_PREFIX}",
                             change_json(b), sequence=True)
        for path in {CHANGES[b.pattern_type] for b in resources.values()}:
            await self._prune(path)
        await self.load()

    async def _prune(self, path: str) -> None:
        """The oldest notifications beyond KEEP_CHANGES go (every broker has read them)."""
        children = sorted(await self._call("get_children_async", path))
        for name in children[:-KEEP_CHANGES]:
            try:
                await self._call("delete_async", f"{path}/{name}")
            except NoNodeError:
                pass        # another broker pruned it

    async def _update(self, b: AclBinding, add: list, remove: list) -> None:
        """One resource's znode: read, change, write on its version (retried)."""
        path = resource_path(b)
        while True:
            try:
                data, stat = await self._call("get_async", path)
                current = set(parse_acls(data, b.resource_type, b.name, b.pattern_type))
            except NoNodeError:
                current, stat = set(), None
            want = (current | set(add)) - set(remove)
            try:
                if stat is None:
                    if want:
                        await self._call("create_async", path, acls_json(want), makepath=True)
                elif want:
                    await self._call("set_async", path, acls_json(want), version=stat.version)
                else:
                    await self._call("delete_async", path, version=stat.version)
                return
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue
