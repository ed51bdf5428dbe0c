"""SCRAM users over ZooKeeper (mpbroker/controller/zk/scram_users.py and the cache's
/config/users watch), on an in-memory ZooKeeper: Kafka's znodes, quota keys kept."""
import asyncio
import json
from types import SimpleNamespace

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from mpbroker.controller import zkdata
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.scram_users import ZkScramUsers
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security import scram_credentials as sc


class FakeZk:
    """The kazoo calls used, synchronous; `watched` records the data watches set."""

    def __init__(self):
        self.nodes = {zkdata.CONFIG_USERS: [b"", 0], zkdata.CONFIG_CHANGES: [b"", 0]}
        self.seq = 0
        self.watched = set()

    def get_async(self, path, watch=None):
        if path not in self.nodes:
            raise NoNodeError()
        if watch:
            self.watched.add(path)
        data, version = self.nodes[path]
        return data, SimpleNamespace(version=version)

    def get_children_async(self, path, watch=None):
        return [p[len(path) + 1:] for p in self.nodes if p.startswith(path + "/")
                and "/" not in p[len(path) + 1:]]

    def create_async(self, path, data, makepath=False, sequence=False):
        if sequence:
            path = f"{path}{self.seq:010d}"
            self.seq += 1
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path] = [data, 0]
        return path

    def set_async(self, path, data, version=-1):
        if path not in self.nodes:
            raise NoNodeError()
        if version != -1 and version != self.nodes[path][1]:
            raise BadVersionError()
        self.nodes[path] = [data, self.nodes[path][1] + 1]


class Session:
    def __init__(self, zk):
        self.zk = zk
        self.watch = object()

    async def call(self, fn, *args, **kw):
        return fn(*args, **kw)


def make(zk):
    cache = ZnodeCache(Session(zk), 1, "c", lambda: {"delete.topic.enable": True})
    return cache, ZkScramUsers(cache.session, cache)


def salted(pw="pw", mech=sc.SHA256):
    return sc.salted_password(mech, pw, b"salt", 4096)


def test_alter_writes_kafkas_znodes_and_keeps_the_quota_keys():
    zk = FakeZk()
    zk.nodes["/config/users/bob"] = [zkdata.config_json({"producer_byte_rate": "1024"}), 3]
    cache, users = make(zk)
    res = asyncio.run(users.alter([], [("bob", 1, 4096, b"salt", salted()),
                                       ("a b*", 2, 4096, b"salt", salted(mech=sc.SHA512))]))
    assert res == [("bob", 0, None), ("a b*", 0, None)]
    bob = json.loads(zk.nodes["/config/users/bob"][0])
    assert bob["version"] == 1 and bob["config"]["producer_byte_rate"] == "1024"
    assert bob["config"]["SCRAM-SHA-256"] == sc.credential_to_string(
        sc.credential_from_password(sc.SHA256, "pw", 4096, b"salt"))
    assert "/config/users/a%20b%2A" in zk.nodes
    changes = sorted(p for p in zk.nodes if p.startswith("/config/changes/config_change_"))
    assert [json.loads(zk.nodes[p][0]) for p in changes] == [
        {"version": 2, "entity_path": "users/bob"}, {"version": 2, "entity_path": "users/a%20b%2A"}]
    # the cache (this broker's view) has them, watched
    md = cache.build(5)
    assert md.scram_credential("a b*", "SCRAM-SHA-512").iterations == 4096
    assert "/config/users/bob" in zk.watched
    # deleting bob's credential leaves his quota
    assert asyncio.run(users.alter([("bob", 1)], [])) == [("bob", 0, None)]
    assert json.loads(zk.nodes["/config/users/bob"][0])["config"] == {"producer_byte_rate": "1024"}
    assert "bob" not in cache.build(6).scram_users
    [d] = asyncio.run(users.describe(["bob"]))
    assert d["error_code"] == ErrorCode.RESOURCE_NOT_FOUND


def test_another_brokers_change_is_seen_through_the_watches():
    zk = FakeZk()
    cache, _ = make(zk)
    other, other_users = make(zk)
    asyncio.run(cache.load_scram_users(all_users=True))
    asyncio.run(other_users.alter([], [("carol", 1, 4096, b"salt", salted())]))
    assert "carol" not in cache.scram
    asyncio.run(cache.refresh(zkdata.CONFIG_USERS))          # the children watch fired
    assert cache.build(1).scram_credential("carol", "SCRAM-SHA-256") is not None
    asyncio.run(other_users.alter([], [("carol", 1, 8192, b"salt", salted())]))
    asyncio.run(cache.refresh("/config/users/carol"))         # the data watch fired
    assert cache.scram["carol"]["SCRAM-SHA-256"].iterations == 8192
    # a user znode that is not Kafka's JSON is ignored, not fatal
    zk.nodes["/config/users/bad"] = [b"{not json", 0]
    asyncio.run(cache.refresh(zkdata.CONFIG_USERS))
    assert set(cache.scram) == {"carol"}


def test_sanitized_names():
    assert zkdata.sanitize("User.name-_1") == "User.name-_1"
    assert zkdata.sanitize("a b*~é") == "a%20b%2A%7E%C3%A9"
    assert zkdata.desanitize("a%20b%2A%7E%C3%A9") == "a b*~é"
