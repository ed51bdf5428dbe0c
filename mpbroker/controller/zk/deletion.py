"""Topic deletion on the active controller (Kafka's TopicDeletionManager).

`/admin/delete_topics/<t>` marks the topic; every broker watches those children and
leaves a marked topic out of its view (the cache's `hidden`: clients get
UNKNOWN_TOPIC_OR_PARTITION, workers delete their logs). The active controller stops
electing for it and sends StopReplica(delete=true) to every replica, again every
DELETE_RETRY_S until each answered, also to a replica whose broker was down and came
back; only when all answered does it remove the topic's znodes and the request. A
replica offline keeps the deletion pending (the name cannot be reused).
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Dict, Set, Tuple

from mpbroker.controller import zkdata
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.channel import BrokerChannel
from mpbroker.controller.zk.controllership import Controllership

log = logging.getLogger(__name__)

DELETE_RETRY_S = 5.0      # StopReplica(delete) again to a replica that has not answered
                          # (at once after a failed send, or when its broker registers)


class TopicDeletion:
    def __init__(self, cache: ZnodeCache, controllership: Controllership,
                 channel: BrokerChannel, broker_cfg: Callable[[], object]):
        self.cache = cache
        self.controllership = controllership
        self.channel = channel
        self._broker_cfg = broker_cfg
        self.acked: Dict[str, Set[int]] = {}   # topic -> replicas that deleted it
        self.sent: Dict[Tuple[str, int], float] = {}   # (topic, broker) -> last StopReplica

    def new_term(self) -> None:
        """Deletions restart with each controller term."""
        self.acked, self.sent = {}, {}

    def resend_to(self, b: int) -> None:
        """Broker b came back or could not be reached: its StopReplica at the next tick."""
        for key in [k for k in self.sent if k[1] == b]:
            del self.sent[key]

    async def progress(self) -> None:
        """One step per tick for each marked topic: the replicas that have not answered
        StopReplica(delete=true) get it (again after DELETE_RETRY_S; an offline one when
        it is back); once all answered, the topic's znodes and the request go. With
        delete.topic.enable=false the request is dropped."""
        cache, ctl = self.cache, self.controllership
        enabled = self._broker_cfg()["delete.topic.enable"]
        now = time.monotonic()
        for name in sorted(cache.deleting):
            if not ctl.active:
                return
            if not enabled:
                log.info("topic deletion is disabled: dropping the request to delete %s", name)
                await ctl.delete_fenced([f"{zkdata.DELETE_TOPICS}/{name}"])
                continue
            ta = cache.topics.get(name)
            parts = ta.partitions if ta is not None else {}
            pending = {r for ar in parts.values() for r in ar} - self.acked.get(name, set())
            for b in sorted(pending & set(cache.brokers)):
                if now - self.sent.get((name, b), -DELETE_RETRY_S) >= DELETE_RETRY_S:
                    self.sent[(name, b)] = now
                    self.channel.queue(b, set(), {(name, p): True for p, ar in parts.items() if b in ar})
            if pending:
                continue
            paths = await ctl.subtree(zkdata.topic_path(name)) + \
                await ctl.subtree(zkdata.topic_config_path(name))
            if await ctl.delete_fenced(paths + [f"{zkdata.DELETE_TOPICS}/{name}"]):
                log.info("deleted topic %s", name)
                cache.drop_topic(name)
                cache.deleting.discard(name)
                self.acked.pop(name, None)
                for key in [k for k in self.sent if k[0] == name]:
                    del self.sent[key]

    def answered(self, b: int, stop: dict, resp: dict) -> None:
        """A StopReplica response of broker b: the topics it deleted without error."""
        if resp.get("error_code"):
            return
        failed = {e["topic_name"] for e in resp.get("partition_errors") or () if e["error_code"]}
        for t in {t for (t, _), delete in stop.items() if delete} - failed:
            if t in self.cache.deleting:
                self.acked.setdefault(t, set()).add(b)
                self.cache.wake.set()
