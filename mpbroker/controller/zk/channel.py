"""The controller -> broker channel, both sides.

The active controller tells the brokers about every leader/ISR change over the Kafka
protocol as Kafka's ControllerChannelManager does: LeaderAndIsr (v5) to the replicas of
the changed partitions, UpdateMetadata (v7) to every live broker, StopReplica (v3) with
delete to the replicas of deleted topics (their answers drive the deletion) and without
to a broker in controlled shutdown. One sender task per broker drains that broker's
outbox (coalesced), with a 5 s request timeout; a broker that does not answer gets
everything again with the next change.

The receiving broker (`receive`) checks the controller and broker epochs and re-reads
the named znodes (ZooKeeper stays the source of truth; its watches deliver the same
changes). A StopReplica without delete (controlled shutdown) makes this broker stop
following those partitions for the rest of its run (the cache shows it offline there).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Dict, Optional

from mpbroker.controller import broker_requests
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.controllership import Controllership
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.client import inter_broker_cached
from workers.kafka_client import KafkaConnection

log = logging.getLogger(__name__)

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6


class BrokerChannel:
    def __init__(self, cache: ZnodeCache, controllership: Controllership, broker_id: int):
        self.cache = cache
        self.controllership = controllership
        self.broker_id = broker_id
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._outbox: Dict[int, dict] = {}  # broker id -> {"changed", "lai", "stop", "sent"}
        self._senders: Dict[int, asyncio.Task] = {}
        self._conns: Dict[int, object] = {}
        # the deletion's side: a StopReplica answered / a broker that could not be reached
        self.on_stop_answered: Callable[[int, dict, dict], None] = lambda b, stop, resp: None
        self.on_send_failed: Callable[[int], None] = lambda b: None

    # ----------------------------------------------------------------- sending (controller)
    def new_term(self) -> None:
        """A new controller tells every broker the whole state."""
        cache = self.cache
        self._outbox, self._conns = {}, {}
        for b in cache.brokers:
            self.queue(b, set(cache.states), {}, {
                k for k in cache.states if k[0] in cache.topics
                and b in cache.topics[k[0]].partitions.get(k[1], ())})

    def changed(self, key) -> None:
        """Partition `key`'s state changed: UpdateMetadata to all, LeaderAndIsr to its replicas."""
        topics = self.cache.topics
        ar = topics[key[0]].partitions.get(key[1], ()) if key[0] in topics else ()
        for b in self.cache.brokers:
            self.queue(b, {key}, {}, {key} if b in ar else set())

    def queue(self, b: int, changed: set, stop: dict, lai: set = frozenset(),
              sent: Optional[asyncio.Future] = None) -> None:
        """Queue for broker b: UpdateMetadata of `changed`, LeaderAndIsr of `lai`,
        StopReplica of `stop` ({(topic, partition): delete}); `sent` gets True once
        broker b answered them, False when that failed."""
        if not self.controllership.active or self.loop is None:
            return
        box = self._outbox.setdefault(b, {"changed": set(), "lai": set(), "stop": {}, "sent": []})
        box["changed"] |= changed
        box["lai"] |= lai
        for key, delete in stop.items():
            box["stop"][key] = box["stop"].get(key, False) or delete
        if sent is not None:
            box["sent"].append(sent)
        task = self._senders.get(b)
        if task is None or task.done():
            self._senders[b] = self.loop.create_task(self._send_loop(b))

    async def _send_loop(self, b: int) -> None:
        while self.controllership.active and b in self._outbox:
            box = self._outbox.pop(b)
            info = self.cache.brokers.get(b)
            if info is None:
                self._settle(box, False)
                return
            try:
                conn = self._conns.get(b)
                if conn is None or conn.closed:
                    conn = self._conns[b] = await KafkaConnection.connect(
                        info.host, info.port, client_id=f"mpbroker-controller-{self.broker_id}",
                        timeout_ms=5000, security=inter_broker_cached(self.cache._broker_cfg()))
                head = {"controller_id": self.broker_id,
                        "controller_epoch": self.controllership.epoch, "broker_epoch": info.epoch}
                if box["lai"]:
                    body = dict(head, type=0, topic_states=self._topic_states(box["lai"], True),
                                live_leaders=self._live_leaders(box["lai"]))
                    resp = await conn.request(LEADER_AND_ISR, 5, body)
                    self._check_reply(b, "LeaderAndIsr", resp)
                if box["changed"]:
                    body = dict(head, topic_states=self._topic_states(box["changed"], False),
                                live_brokers=[{"id": x.id, "endpoints": [
                                    {"port": x.port, "host": x.host, "listener": "PLAINTEXT",
                                     "security_protocol": 0}], "rack": x.rack}
                                    for x in self.cache.brokers.values()])
                    resp = await conn.request(UPDATE_METADATA, 7, body)
                    self._check_reply(b, "UpdateMetadata", resp)
                if box["stop"]:
                    resp = await conn.request(STOP_REPLICA, 3,
                                              dict(head, topic_states=self._stop_states(box["stop"])))
                    self._check_reply(b, "StopReplica", resp)
                    self.on_stop_answered(b, box["stop"], resp)
            except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                log.info("controller request to broker %d failed: %s", b, e)
                self._settle(box, False)
                self.on_send_failed(b)
                old = self._conns.pop(b, None)
                if old is not None:
                    await old.close()
                return
            self._settle(box, True)

    @staticmethod
    def _settle(box: dict, ok: bool) -> None:
        for fut in box["sent"]:
            if not fut.done():
                fut.set_result(ok)

    @staticmethod
    def _check_reply(b: int, what: str, resp: dict) -> None:
        if resp.get("error_code"):
            log.warning("%s to broker %d: error %d", what, b, resp["error_code"])

    def _stop_states(self, stop: dict) -> list:
        """StopReplica v3 topic_states; the leader epoch is -2 for a deletion (Kafka's
        EpochDuringDelete), else the current one."""
        by_topic: Dict[str, list] = {}
        for (t, p), delete in sorted(stop.items()):
            st = self.cache.states.get((t, p))
            epoch = -2 if delete else (st.leader_epoch if st is not None else -1)
            by_topic.setdefault(t, []).append(
                {"partition_index": p, "leader_epoch": epoch, "delete_partition": delete})
        return [{"topic_name": t, "partition_states": ps} for t, ps in by_topic.items()]

    def _topic_states(self, keys, leader_and_isr: bool) -> list:
        cache = self.cache
        by_topic: Dict[str, list] = {}
        for t, p in sorted(keys):
            ta, st = cache.topics.get(t), cache.states.get((t, p))
            if ta is None or st is None or p not in ta.partitions:
                continue
            ar = list(ta.partitions[p])
            ps = {"partition_index": p, "controller_epoch": st.controller_epoch, "leader": st.leader,
                  "leader_epoch": st.leader_epoch, "isr": list(st.isr), "replicas": ar}
            if leader_and_isr:
                ps.update(partition_epoch=st.zk_version,
                          adding_replicas=list((ta.adding or {}).get(p, ())),
                          removing_replicas=list((ta.removing or {}).get(p, ())))
            else:
                gone = cache.offline.get((t, p), ())
                ps.update(zk_version=st.zk_version,
                          offline_replicas=[r for r in ar if r not in cache.brokers or r in gone])
            by_topic.setdefault(t, []).append(ps)
        return [{"topic_name": t, "topic_id": cache.topics[t].topic_id, "partition_states": ps}
                for t, ps in by_topic.items()]

    def _live_leaders(self, keys) -> list:
        states = self.cache.states
        leaders = {states[k].leader for k in keys if k in states}
        return [{"broker_id": b.id, "host_name": b.host, "port": b.port}
                for i, b in self.cache.brokers.items() if i in leaders]

    # ----------------------------------------------------------------- receiving (any broker)
    async def receive(self, api_key: int, version: int, body: dict, broker_epoch_now: int,
                      session_lost: bool, publish: Callable[[], None]) -> dict:
        """LeaderAndIsr (4) / StopReplica (5) / UpdateMetadata (6) received by this broker:
        STALE_CONTROLLER_EPOCH for an epoch older than the newest this broker knows,
        STALE_BROKER_EPOCH for a broker epoch older than this registration's
        (`broker_epoch_now`); otherwise the named partitions (and, for UpdateMetadata,
        the brokers) are re-read from ZooKeeper and the view is pushed (`publish`). The
        response body for `version`."""
        cache = self.cache
        epoch = body.get("controller_epoch", -1)
        broker_epoch = body.get("broker_epoch", -1)
        if epoch > cache.seen_controller_epoch and not session_lost:
            await cache.load_controller()       # maybe a controller we have not seen yet
        if epoch < cache.seen_controller_epoch:
            err = ErrorCode.STALE_CONTROLLER_EPOCH
        elif broker_epoch not in (-1, None) and broker_epoch < broker_epoch_now:
            err = ErrorCode.STALE_BROKER_EPOCH
        else:
            err = ErrorCode.NONE
            cache.seen_controller_epoch = max(cache.seen_controller_epoch, epoch)
        parts = broker_requests.partitions(api_key, version, body)
        errors = {}
        if err == ErrorCode.NONE and not session_lost:
            if api_key == UPDATE_METADATA:
                await cache.load_brokers()
            if api_key == STOP_REPLICA:
                deletes = broker_requests.stop_deletes(version, body)
                if any(deletes.values()):
                    await cache.load_deletions()  # delete: the topic leaves our view
                self._stop_replicas(deletes)
            if any(t not in cache.topics for t, _, _ in parts):
                await cache.load_topics()
            known = [(t, p) for t, p, _ in parts
                     if t in cache.topics and p in cache.topics[t].partitions]
            # and the partitions of the same topics not in the view yet: a new topic's
            # states are created together (controllership.init_partitions), and a
            # LeaderAndIsr names only this broker's, so the view would otherwise show the
            # topic with some partitions until the UpdateMetadata that follows
            named = set(known)
            siblings = [(t, p) for t in {t for t, _ in known} for p in cache.topics[t].partitions
                        if (t, p) not in cache.states and (t, p) not in named]
            await asyncio.gather(*(cache.load_state(t, p) for t, p in known + siblings))
            for t, p, _ in parts:
                errors[(t, p)] = ErrorCode.NONE if (t, p) in known or api_key == STOP_REPLICA \
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            publish()
            log.info("%s v%d from controller %d (epoch %d): %d partitions",
                     broker_requests.NAMES[api_key], version,
                     body.get("controller_id", -1), epoch, len(parts))
        else:
            log.warning("refused %s from controller %d epoch %d (known epoch %d, broker epoch %s/%d): %d",
                        broker_requests.NAMES[api_key], body.get("controller_id", -1), epoch,
                        cache.seen_controller_epoch, broker_epoch, broker_epoch_now, err)
            errors = {(t, p): err for t, p, _ in parts}
        return broker_requests.response(api_key, version, parts, errors, err)

    def _stop_replicas(self, deletes: dict) -> None:
        """StopReplica without delete (controlled shutdown): this broker stops following
        those partitions for the rest of its run (the cache's `build` shows it offline there)."""
        cache = self.cache
        for key, delete in deletes.items():
            st = cache.states.get(key)
            if not delete and (st is None or st.leader != self.broker_id) and key not in cache.stopped:
                cache.stopped.add(key)
                log.info("stopping the replica of %s-%d (StopReplica)", *key)
