"""mpbroker/controller/zk/client_quotas.py on an in-memory ZooKeeper: Kafka's layout,
<default> names, /config/changes notifications, and a user's other keys (SCRAM
credentials) kept across a quota write."""
import asyncio
import json
from types import SimpleNamespace

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from mpbroker.controller import client_quotas as apply_mod
from mpbroker.controller.zk import client_quotas
from mpbroker.security import quotas as q


class FakeZk:
    def __init__(self):
        self.nodes = {}           # path -> [data, version]
        self.seq = 0
        self.watched = []
        self.races = 0            # set_async fails this many times with BadVersion

    def get_async(self, path, watch=None):
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, SimpleNamespace(version=version)

    def get_children_async(self, path, watch=None):
        if watch is not None:
            self.watched.append(path)
        if path not in self.nodes:
            raise NoNodeError(path)
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def create_async(self, path, data, makepath=False, sequence=False):
        if sequence:
            path = f"{path}{self.seq:010d}"
            self.seq += 1
        if path in self.nodes:
            raise NodeExistsError(path)
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            self.nodes.setdefault("/" + "/".join(parts[:i]), [b"", 0])
        self.nodes[path] = [data, 0]
        return path

    def set_async(self, path, data, version=-1):
        if self.races:
            self.races -= 1
            self.nodes[path][1] += 1
            raise BadVersionError(path)
        if version != -1 and self.nodes[path][1] != version:
            raise BadVersionError(path)
        self.nodes[path] = [data, self.nodes[path][1] + 1]


class FakeSession:
    def __init__(self):
        self.zk = FakeZk()
        self.watch = object()

    async def call(self, fn, *args, **kw):
        return fn(*args, **kw)


def config(zk, path):
    return json.loads(zk.nodes[path][0])["config"]


def test_kafka_layout_notifications_and_reload():
    s = FakeSession()
    entries = [([("client-id", "app")], [(q.PRODUCER_BYTE_RATE, 1024.0, False)]),
               ([("user", None)], [(q.REQUEST_PERCENTAGE, 12.5, False)]),
               ([("user", "alice"), ("client-id", None)], [(q.CONSUMER_BYTE_RATE, 2048.0, False)])]
    new, results, changed = apply_mod.apply({}, entries, False)
    asyncio.run(client_quotas.write(s, new, changed))
    zk = s.zk
    assert config(zk, "/config/clients/app") == {"producer_byte_rate": "1024"}
    assert config(zk, "/config/users/<default>") == {"request_percentage": "12.5"}
    assert config(zk, "/config/users/alice/clients/<default>") == {"consumer_byte_rate": "2048"}
    changes = sorted(p for p in zk.nodes if p.startswith("/config/changes/config_change_"))
    assert [json.loads(zk.nodes[p][0]) for p in changes] == [
        {"version": 2, "entity_path": "clients/app"},
        {"version": 2, "entity_path": "users/<default>"},
        {"version": 2, "entity_path": "users/alice/clients/<default>"}]
    assert asyncio.run(client_quotas.load(s)) == new
    assert "/config/changes" in zk.watched


def test_a_users_scram_credentials_are_kept():
    s = FakeSession()
    scram = {"SCRAM-SHA-256": "salt=abc,stored_key=def,server_key=ghi,iterations=4096"}
    s.zk.create_async("/config/users/alice", json.dumps({"version": 1, "config": scram}).encode(),
                      makepath=True)
    s.zk.races = 2                                # S2 writes the node twice meanwhile
    key = q.entity_key([("user", "alice")])
    asyncio.run(client_quotas.write(s, {key: {q.PRODUCER_BYTE_RATE: 10.0}}, [key]))
    assert config(s.zk, "/config/users/alice") == {**scram, "producer_byte_rate": "10"}
    assert asyncio.run(client_quotas.load(s)) == {key: {q.PRODUCER_BYTE_RATE: 10.0}}
    asyncio.run(client_quotas.write(s, {}, [key]))          # quota removed, credential kept
    assert config(s.zk, "/config/users/alice") == scram
    assert asyncio.run(client_quotas.load(s)) == {}
