"""The kazoo-to-asyncio bridge of the ZooKeeper controller: one kazoo session per broker.

kazoo calls the watch and state callbacks on its own threads; they only hand the event
to this process's asyncio loop (`call_soon_threadsafe`), where all the work runs, and
kazoo's async calls are bridged to asyncio futures (`call`). The boot (connect, the
chroot, /cluster/id, the broker id from meta.properties or /brokers/seqid) is
synchronous: it runs before the controller process's loop.
"""
from __future__ import annotations

import asyncio
from typing import Callable, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError

from mpbroker import config as configmod
from mpbroker.controller import zkdata
from mpbroker.metadata import model, store


class ZkSession:
    """The kazoo client and the bridge of its calls and callbacks to the asyncio loop."""

    def __init__(self, cfg: configmod.BrokerConfig):
        self.connect = cfg["zookeeper.connect"]
        self.session_timeout_s = cfg["zookeeper.session.timeout.ms"] / 1000
        timeout_ms = cfg.zookeeper_connection_timeout_ms
        try:
            hosts, chroot = zkdata.split_connect(self.connect)
        except ValueError as e:
            raise configmod.ConfigError(str(e))
        try:
            if chroot:   # Kafka creates the chroot path when it is missing
                boot = KazooClient(hosts, timeout=self.session_timeout_s)
                try:
                    boot.start(timeout=timeout_ms / 1000)
                    boot.ensure_path(chroot)
                finally:
                    boot.stop()
                    boot.close()
            self.zk = KazooClient(hosts + chroot, timeout=self.session_timeout_s)
            self.zk.start(timeout=timeout_ms / 1000)
        except KazooTimeoutError:
            raise configmod.ConfigError(
                f"Timed out waiting for connection to ZooKeeper at {self.connect} "
                f"within zookeeper.connection.timeout.ms={timeout_ms}") from None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.on_path: Callable[[str], None] = lambda path: None
        self.on_state: Callable[[object], None] = lambda state: None

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    # ----------------------------------------------------------------- boot (sync)
    def ensure_paths(self) -> None:
        for path in zkdata.PERSISTENT_PATHS:
            self.zk.ensure_path(path)

    def cluster_id(self) -> str:
        """/cluster/id, created with a new id by the first broker."""
        try:
            self.zk.create(zkdata.CLUSTER_ID,
                           zkdata.cluster_id_json(model.generate_cluster_id()), makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.zk.get(zkdata.CLUSTER_ID)
        try:
            return zkdata.parse_cluster_id(data)
        except zkdata.ZkDataError as e:
            raise configmod.ConfigError(str(e))

    def claim_broker_id(self, cfg: configmod.BrokerConfig, cluster_id: str) -> int:
        """meta.properties in every log dir (seed 000 §6.5.1): stored and configured
        broker ids must agree, the stored cluster id must be ZooKeeper's; a broker without
        an id gets one from /brokers/seqid (above reserved.broker.max.id)."""
        try:
            stored = set()
            for d in cfg.log_dirs:
                props = store.read_meta_properties(d)
                if props is not None:
                    stored.add(int(props["broker.id"]))
            broker_id = cfg.broker_id
            if broker_id < 0 and not stored and cfg["broker.id.generation.enable"]:
                stat = self.zk.set(zkdata.BROKER_SEQID, b"")
                broker_id = stat.version + cfg["reserved.broker.max.id"]
            broker_id, _ = store.ensure_meta_properties(
                cfg.log_dirs, broker_id, cluster_id,
                reserved_broker_max_id=cfg["reserved.broker.max.id"],
                generation_enabled=cfg["broker.id.generation.enable"])
        except store.MetadataStoreError as e:
            raise configmod.ConfigError(f"{type(e).__name__}: {e}")
        return broker_id

    # ----------------------------------------------------------------- asyncio bridge
    def attach(self, loop: asyncio.AbstractEventLoop, on_path, on_state) -> None:
        """From now on, watch events call `on_path(path)` and session state changes
        `on_state(state)` on `loop`."""
        self.loop = loop
        self.on_path, self.on_state = on_path, on_state
        self.zk.add_listener(self._state_listener)

    def call(self, fn, *args, **kw):
        """Run a kazoo *_async call; an awaitable of its result (bounded by twice the
        session timeout, at least 5 s)."""
        loop = self.loop
        fut = loop.create_future()

        def settle(ok, value):
            if not fut.done():
                (fut.set_result if ok else fut.set_exception)(value)

        def done(ar):
            try:
                res = (True, ar.get_nowait())
            except Exception as e:
                res = (False, e)
            try:
                loop.call_soon_threadsafe(settle, *res)
            except RuntimeError:
                pass              # the loop is closed: the process is stopping
        fn(*args, **kw).rawlink(done)
        return asyncio.wait_for(fut, max(5.0, self.session_timeout_s * 2))

    def watch(self, event) -> None:      # kazoo thread
        if event.path is None:           # a session event (no znode): on_state has it
            return
        try:
            self.loop.call_soon_threadsafe(self.on_path, event.path)
        except RuntimeError:
            pass

    def _state_listener(self, state) -> None:   # kazoo thread: never block here
        try:
            self.loop.call_soon_threadsafe(self.on_state, state)
        except RuntimeError:
            pass

    def transaction(self):
        return self.zk.transaction()

    @property
    def connected(self) -> bool:
        return self.zk.connected
