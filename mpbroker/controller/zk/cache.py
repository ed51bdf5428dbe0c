"""The znode cache of the ZooKeeper controller, in every broker's controller process.

It holds the znodes this broker watches (`/brokers/ids`, `/controller`,
`/brokers/topics`, each topic znode, each partition's state znode, `/config/topics/<t>`,
`/admin/delete_topics`, `/mpbroker/offline_replicas`) and builds from them a
`ClusterMetadata` view (live brokers only; `partition_epoch` = the state znode's
version). A watch marks its path dirty and wakes the controller's loop, which reloads
the dirty paths (`refresh`). Formats and paths: `mpbroker/controller/zkdata.py`.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Dict, Set, Tuple

from kazoo.exceptions import NodeExistsError, NoNodeError

from mpbroker.controller import zkdata
from mpbroker.controller.zk import acls
from mpbroker.controller.zk.acls import ZkAcls
from mpbroker.controller.zk import client_quotas
from mpbroker.controller.zk.session import ZkSession
from mpbroker.metadata import model, scram_users
from mpbroker.metadata.model import INTERNAL_TOPICS

log = logging.getLogger(__name__)


class ZnodeCache:
    def __init__(self, session: ZkSession, broker_id: int, cluster_id: str,
                 broker_cfg: Callable[[], object]):
        self.session = session
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self._broker_cfg = broker_cfg
        self.inter_broker_listener: str | None = None   # the controller sets it (issue #17)
        self.brokers: Dict[int, zkdata.BrokerInfo] = {}
        self.topics: Dict[str, zkdata.TopicAssignment] = {}
        self.topic_versions: Dict[str, int] = {}
        self.states: Dict[Tuple[str, int], zkdata.LeaderAndIsr] = {}
        self.configs: Dict[str, Dict[str, str]] = {}
        self.client_quotas: Dict[tuple, Dict[str, float]] = {}   # issue #17: zk/client_quotas.py
        self.controller_id = -1
        self.deleting: Set[str] = set()     # the children of /admin/delete_topics
        self.stopped: Set[Tuple[str, int]] = set()  # StopReplica(delete=false) received
        self.seen_epoch_zk_version = -1     # /controller_epoch's version when last read
        self.seen_controller_epoch = 0      # the newest /controller_epoch this broker knows
        # replicas in failed log dirs, per partition (zkdata.OFFLINE_REPLICAS); ours as told
        self.offline: Dict[Tuple[str, int], Set[int]] = {}
        self.offline_mine: Set[Tuple[str, int]] = set()
        # SCRAM users (issue 17): /config/users/<u>'s credentials, user -> {mechanism: credential}
        self.scram: Dict[str, Dict[str, object]] = {}
        self._users_watched: Set[str] = set()   # whose znode has a data watch
        self.dirty: Set[str] = set()
        self.wake = asyncio.Event()
        # --- ACLs (issue #17): read by ZkAcls (zk/acls.py), published with the metadata
        self.acls: tuple = ()
        self.acl_version = 0
        self.acl_store = ZkAcls(session, self)
        # --- end ACLs
        # what the owner does when the live brokers / the controller change
        self.on_brokers: Callable[[dict, dict], None] = lambda old, new: None
        self.on_controller: Callable[[int], None] = lambda cid: None

    def mark(self, path: str) -> None:
        """A watched znode changed: reload it in the controller's loop."""
        self.dirty.add(path)
        self.wake.set()

    def _get(self, path: str, watch: bool = False):
        return self.session.call(self.session.zk.get_async, path,
                                 self.session.watch if watch else None)

    def _exists(self, path: str, watch: bool = False):
        return self.session.call(self.session.zk.exists_async, path,
                                 self.session.watch if watch else None)

    def _children(self, path: str):
        return self.session.call(self.session.zk.get_children_async, path, self.session.watch)

    async def full_reload(self) -> None:
        await self.load_brokers()
        await self.load_controller()
        await self.load_deletions()
        await self.load_topics(all_topics=True)
        await self.load_offline()
        await self.load_scram_users(all_users=True)
        await self.acl_store.load()
        self.client_quotas = await client_quotas.load(self.session)

    async def refresh(self, path: str) -> bool:
        """Reload what `path` names; True when it is one of the /admin or ISR
        notification znodes that the active controller handles."""
        if path == zkdata.BROKER_IDS:
            await self.load_brokers()
        elif path == zkdata.CONTROLLER:
            await self.load_controller()
        elif path == zkdata.TOPICS:
            await self.load_topics()
        elif path == zkdata.DELETE_TOPICS:
            await self.load_deletions()
            return True
        elif path in acls.CHANGE_PATHS:
            await self.acl_store.load()
        elif path in (zkdata.PREFERRED_ELECTION, zkdata.ISR_CHANGES, zkdata.REASSIGN):
            return True
        elif path == zkdata.CONFIG_USERS:
            await self.load_scram_users()
        elif path.startswith(zkdata.CONFIG_USERS + "/") and "/" not in path[len(zkdata.CONFIG_USERS) + 1:]:
            await self.load_scram_user(zkdata.desanitize(path[len(zkdata.CONFIG_USERS) + 1:]))
        elif path == zkdata.CONFIG_CHANGES:       # client quotas changed somewhere
            self.client_quotas = await client_quotas.load(self.session)
        elif path == zkdata.OFFLINE_REPLICAS or path.startswith(zkdata.OFFLINE_REPLICAS + "/"):
            await self.load_offline()
        else:
            tp = zkdata.parse_state_path(path)
            if tp is not None:
                if tp[0] in self.topics:
                    await self.load_state(*tp)
            elif path.startswith(zkdata.TOPICS + "/"):
                name = path[len(zkdata.TOPICS) + 1:]
                if "/" not in name:
                    await self.load_topic(name)
            elif path.startswith(zkdata.CONFIG_TOPICS + "/"):
                name = path[len(zkdata.CONFIG_TOPICS) + 1:]
                if name in self.topics:
                    await self.load_config(name)
        return False

    async def load_brokers(self) -> None:
        ids = await self._children(zkdata.BROKER_IDS)
        brokers = {}
        for s in ids:
            try:
                bid = int(s)
                data, stat = await self._get(zkdata.broker_path(bid))
                brokers[bid] = zkdata.parse_broker(bid, data, stat.czxid,
                                                   self.inter_broker_listener)
            except NoNodeError:
                continue
            except (ValueError, zkdata.ZkDataError) as e:
                log.warning("ignoring broker registration %s: %s", s, e)
        gone = set(self.brokers) - set(brokers)
        new = set(brokers) - set(self.brokers)
        if gone or new:
            log.info("live brokers %s (new %s, gone %s)", sorted(brokers), sorted(new), sorted(gone))
        old, self.brokers = self.brokers, brokers
        self.on_brokers(old, brokers)

    async def load_offline(self) -> None:
        """Every broker's replicas in failed log dirs (watched): elections leave them out."""
        try:
            ids = await self._children(zkdata.OFFLINE_REPLICAS)
        except NoNodeError:
            if await self._exists(zkdata.OFFLINE_REPLICAS, watch=True) is not None:
                self.mark(zkdata.OFFLINE_REPLICAS)      # created meanwhile
            ids = []
        offline: Dict[Tuple[str, int], Set[int]] = {}
        for s in ids:
            path = f"{zkdata.OFFLINE_REPLICAS}/{s}"
            try:
                data, _ = await self._get(path, watch=True)
                for key in zkdata.parse_partitions(data, path):
                    offline.setdefault(key, set()).add(int(s))
            except NoNodeError:
                continue
            except (ValueError, zkdata.ZkDataError) as e:
                log.warning("ignoring %s: %s", path, e)
        if offline != self.offline:
            log.info("replicas in failed log dirs: %s", {f"{t}-{p}": sorted(b) for (t, p), b
                                                          in sorted(offline.items())})
        self.offline = offline

    async def publish_offline(self) -> None:
        """This broker's replicas in failed log dirs, in its ephemeral znode."""
        zk, call = self.session.zk, self.session.call
        data = zkdata.partitions_json(sorted(self.offline_mine))
        path = zkdata.offline_replicas_path(self.broker_id)
        try:
            await call(zk.set_async, path, data)
        except NoNodeError:
            try:
                await call(zk.create_async, path, data, ephemeral=True, makepath=True)
            except NodeExistsError:         # another worker's report made it meanwhile
                await call(zk.set_async, path, data)

    async def load_controller(self) -> None:
        stat = await self._exists(zkdata.CONTROLLER, watch=True)
        cid = -1
        if stat is not None:
            try:
                data, _ = await self._get(zkdata.CONTROLLER)
                cid = zkdata.parse_controller(data)
            except NoNodeError:
                cid = -1
            except zkdata.ZkDataError as e:
                log.warning("%s", e)
        if cid != -1:
            try:
                data, stat = await self._get(zkdata.CONTROLLER_EPOCH)
                self.seen_controller_epoch = max(self.seen_controller_epoch, int(data or b"0"))
                self.seen_epoch_zk_version = stat.version
            except (NoNodeError, ValueError):
                pass
        if cid != self.controller_id:
            log.info("controller is now broker %d", cid)
        self.controller_id = cid
        self.on_controller(cid)
        if cid == -1:
            self.wake.set()

    async def load_deletions(self) -> None:
        names = set(await self._children(zkdata.DELETE_TOPICS))
        if names != self.deleting:
            log.info("topics marked for deletion: %s", sorted(names))
        self.deleting = names

    def hidden(self, name: str) -> bool:
        """Marked for deletion: out of every view (Kafka's LeaderDuringDelete)."""
        return name in self.deleting and bool(self._broker_cfg()["delete.topic.enable"])

    async def load_topics(self, all_topics: bool = False) -> None:
        names = set(await self._children(zkdata.TOPICS))
        for gone in set(self.topics) - names:
            self.drop_topic(gone)
        todo = names if all_topics else names - set(self.topics)
        # all_topics (a new session): states and configs again too, with new watches
        await asyncio.gather(*(self.load_topic(n, full=all_topics) for n in todo))

    def drop_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        self.topic_versions.pop(name, None)
        self.configs.pop(name, None)
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]

    async def load_topic(self, name: str, full: bool = False) -> None:
        try:
            data, stat = await self._get(zkdata.topic_path(name), watch=True)
            ta = zkdata.parse_topic(name, data)
        except NoNodeError:
            self.drop_topic(name)
            return
        except zkdata.ZkDataError as e:
            log.warning("ignoring topic %s: %s", name, e)
            return
        if ta.topic_id is None:
            log.warning("topic %s has no topic id in ZooKeeper: ignored", name)
            return
        first = name not in self.topics
        self.topics[name] = ta
        self.topic_versions[name] = stat.version
        for key in [k for k in self.states if k[0] == name and k[1] not in ta.partitions]:
            del self.states[key]
        todo = [p for p in ta.partitions if (name, p) not in self.states or first or full]
        await asyncio.gather(*(self.load_state(name, p) for p in todo))
        if first or full:
            await self.load_config(name)

    async def load_state(self, name: str, p: int) -> None:
        path = zkdata.state_path(name, p)
        try:
            data, stat = await self._get(path, watch=True)
        except NoNodeError:
            self.states.pop((name, p), None)
            if await self._exists(path, watch=True) is not None:
                self.mark(path)
            return
        try:
            self.states[(name, p)] = zkdata.parse_state(data, stat.version, path)
        except zkdata.ZkDataError as e:
            log.warning("%s", e)

    async def load_config(self, name: str) -> None:
        path = zkdata.topic_config_path(name)
        try:
            data, _ = await self._get(path, watch=True)
            self.configs[name] = zkdata.parse_config(data, path)
        except NoNodeError:
            self.configs[name] = {}
            await self._exists(path, watch=True)
        except zkdata.ZkDataError as e:
            log.warning("%s", e)

    # ---- SCRAM users (issue 17): a watch on /config/users and on each user's znode
    async def load_scram_users(self, all_users: bool = False) -> None:
        names = {zkdata.desanitize(n) for n in await self._children(zkdata.CONFIG_USERS)}
        for gone in set(self.scram) - names:
            del self.scram[gone]
        self._users_watched &= names
        todo = names if all_users else names - self._users_watched
        await asyncio.gather(*(self.load_scram_user(n) for n in todo))

    async def load_scram_user(self, user: str) -> None:
        path = zkdata.user_config_path(user)
        try:
            data, _ = await self._get(path, watch=True)
            creds = scram_users.credentials_from_config(user, zkdata.parse_config(data, path))
        except NoNodeError:
            creds = {}
        except zkdata.ZkDataError as e:
            log.warning("%s", e)
            return
        self._users_watched.add(user)
        if creds:
            self.scram[user] = creds
        else:
            self.scram.pop(user, None)
    # ---- end SCRAM users

    def build(self, epoch: int) -> model.ClusterMetadata:
        """The metadata view of the cache (`epoch`: the caller's; it bumps it on a change)."""
        brokers = {i: model.Broker(b.id, b.host, b.port, b.rack, b.endpoints)
                   for i, b in sorted(self.brokers.items())}
        topics = {}
        me = self.broker_id
        for name, ta in self.topics.items():
            if self.hidden(name):
                continue
            parts = {}
            for p, ar in sorted(ta.partitions.items()):
                st = self.states.get((name, p))
                if st is None:
                    continue      # not initialized by the controller yet: not visible
                # this broker is offline only where it was told to stop replicating
                stopped = (name, p) in self.stopped and st.leader != me
                gone = self.offline.get((name, p), ())
                offline = tuple(r for r in ar if (r != me and (r not in brokers or r in gone))
                                or (r == me and stopped))
                parts[p] = model.PartitionState(p, st.leader, st.leader_epoch, ar, st.isr,
                                                offline, st.zk_version)
            if parts:
                topics[name] = model.Topic(name, ta.topic_id, parts, dict(self.configs.get(name, {})),
                                           name in INTERNAL_TOPICS,
                                           len(ta.partitions) if len(parts) < len(ta.partitions) else -1)
        return model.ClusterMetadata(self.cluster_id, self.controller_id, brokers, topics, epoch,
                                     scram_users={u: dict(c) for u, c in self.scram.items()},
                                     acls=self.acls, acl_version=self.acl_version,
                                     client_quotas=self.client_quotas)

    def unclean(self, topic: str) -> bool:
        """unclean.leader.election.enable of `topic` (its override, else the broker's)."""
        v = self.configs.get(topic, {}).get("unclean.leader.election.enable")
        if v is not None:
            return v.lower() == "true"
        return bool(self._broker_cfg()["unclean.leader.election.enable"])
