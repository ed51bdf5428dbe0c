"""Topic administration over ZooKeeper, served by any broker: CreateTopics (config
znode, then the topic znode the controller initializes), internal topics,
DeleteTopics (marks `/admin/delete_topics/<t>`: `deletion.py` does the rest),
CreatePartitions (a fenced write conditional on the topic znode's version),
AlterConfigs of topics (`/config/topics/<t>` and a `/config/changes` notification), and
producer id blocks (`/latest_producer_id_block`, compare-and-set on its version).

The checks shared with the embedded controller are in `topic_requests.py`,
`config_ops.py` and `limits.py`. A request that creates or deletes waits (bounded by its
timeout) until this broker's view shows the outcome.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Callable, Dict, Set

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from mpbroker import config as configmod
from mpbroker.controller import limits, zkdata
from mpbroker.controller import topic_requests
from mpbroker.controller.config_ops import alter_each, alter_topic
from mpbroker.controller.producer_ids import ProducerIdBlocks
from mpbroker.controller.zk.cache import ZnodeCache
from mpbroker.controller.zk.controllership import Controllership
from mpbroker.controller.zk.session import ZkSession
from mpbroker.metadata import model
from mpbroker.metadata.model import MetadataError
from mpbroker.metadata.quota import THROTTLING_MESSAGE
from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

WAIT_CAP_MS = 60000        # the longest a request waits for its outcome to be visible
POLL_S = 0.05              # how often it looks meanwhile (each look reloads the topics)


class TopicAdmin:
    def __init__(self, session: ZkSession, cache: ZnodeCache, controllership: Controllership,
                 cfg, broker_cfg: Callable[[], object], mutation_limits: limits.MutationLimits,
                 metadata: Callable[[], model.ClusterMetadata], alter_broker, broker_id: int):
        self.session = session
        self.cache = cache
        self.controllership = controllership
        self.cfg = cfg
        self._broker_cfg = broker_cfg
        self.limits = mutation_limits
        self._metadata = metadata
        self._alter_broker = alter_broker
        self.broker_id = broker_id
        self.created_configs = topic_requests.CreatedConfigs()
        self.producer_ids = ProducerIdBlocks(self._claim_producer_id_block)

    def _call(self, name: str, *args, **kw):
        """A kazoo client call by name (create_async, set_async, ...), awaited on the loop."""
        return self.session.call(getattr(self.session.zk, name), *args, **kw)

    def _quota(self, quota):
        return self.limits.quota(self._broker_cfg(), quota, self.cache.client_quotas)

    def _caps(self) -> model.PartitionLimits:
        return self.limits.partitions(self._broker_cfg())

    def _reload_soon(self, *paths: str) -> None:
        self.cache.dirty.update(paths)
        self.cache.wake.set()

    async def _wait_visible(self, names_counts: Dict[str, int], timeout_ms: int) -> Set[str]:
        """Wait until each topic shows its partition count with leaders; the names that did."""
        deadline = time.monotonic() + max(0, min(timeout_ms, WAIT_CAP_MS)) / 1000

        def ok(name, count):
            t = self._metadata().topics.get(name)
            return t is not None and len(t.partitions) >= count and \
                all(s.leader >= 0 for s in t.partitions.values())
        while True:
            done = {n for n, c in names_counts.items() if ok(n, c)}
            if len(done) == len(names_counts) or time.monotonic() >= deadline:
                return done
            self._reload_soon(zkdata.TOPICS)
            await asyncio.sleep(POLL_S)

    async def _write_topic(self, name: str, topic: model.Topic) -> None:
        """Config first, then the assignment (what the controller and brokers watch)."""
        if topic.configs:
            try:
                await self._call("create_async", zkdata.topic_config_path(name),
                                 zkdata.config_json(topic.configs), makepath=True)
            except NodeExistsError:
                await self._call("set_async", zkdata.topic_config_path(name),
                                 zkdata.config_json(topic.configs))
        await self._call("create_async", zkdata.topic_path(name),
                         zkdata.topic_json(topic.topic_id, topic.assignment()), makepath=True)

    def view_for_create(self) -> model.ClusterMetadata:
        """The view with every known topic (also those not yet initialized) for validation."""
        md = self._metadata()
        topics = dict(md.topics)
        for name, ta in self.cache.topics.items():
            shown = topics.get(name)
            if shown is None or shown.partition_count >= 0:     # not shown, or in part
                parts = {p: model.PartitionState(p, -1, 0, ar, ()) for p, ar in ta.partitions.items()}
                if shown is not None:
                    parts.update(shown.partitions)
                    topics[name] = replace(shown, partitions=parts, partition_count=-1)
                else:
                    topics[name] = model.Topic(name, ta.topic_id, parts)
        return replace(md, topics=topics)

    # ----------------------------------------------------------------- CreateTopics
    async def create_topics(self, specs, validate_only, timeout_ms, quota=None):
        q = self._quota(quota)
        refused = topic_requests.refuse_oversized(specs, self.cfg)
        if refused is not None:
            return limits.results(refused, q)
        results, created = [], {}
        batch = model.TopicBatch(self.view_for_create(), self._caps())
        for s in specs:
            res = topic_requests.create_result(s["name"])
            try:
                configs = topic_requests.check_create_spec(s)
                if await self._call("exists_async", f"{zkdata.DELETE_TOPICS}/{s['name']}") is not None:
                    raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                        f"Topic '{s['name']}' is marked for deletion.")

                def admit(n, configs=configs):
                    # after the model's checks (their errors come first), before counting
                    configmod.effective_topic_config(self._broker_cfg(), configs)
                    return validate_only or q.try_record(n)
                t = topic_requests.create_in(batch, s, configs, self.cfg, admit)
                if not validate_only:
                    try:
                        await self._write_topic(t.name, t)
                    except NodeExistsError:
                        raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                            f"Topic '{t.name}' already exists.") from None
                    created[t.name] = len(t.partitions)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            except configmod.ConfigError as e:
                res["error_code"], res["error_message"] = ErrorCode.INVALID_CONFIG, str(e)
            else:
                self.created_configs.fill(res, t, self._broker_cfg())
            results.append(res)
        if created and timeout_ms > 0:
            done = await self._wait_visible(created, timeout_ms)
            for res in results:
                if res["name"] in created and res["name"] not in done:
                    res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                    res["error_message"] = "Timed out waiting for the topic's partitions to get leaders."
        return limits.results(results, q)

    async def ensure_internal_topic(self, name: str) -> None:
        """Created on first use with the configured replication factor; while fewer brokers
        are alive than that, nothing is created (FindCoordinator answers
        COORDINATOR_NOT_AVAILABLE), as Kafka does."""
        if name in self._metadata().topics:
            return
        if name not in self.cache.topics:
            n, rf, configs = topic_requests.internal_topic_spec(self.cfg, name)
            if len(self.cache.brokers) < rf:
                log.info("not creating %s: %d live brokers, its replication factor is %d", name,
                         len(self.cache.brokers), rf)
                return
            md = model.create_topic(self.view_for_create(), name, n, rf, None, configs,
                                    **topic_requests.topic_defaults(self.cfg))
            try:
                await self._write_topic(name, md.topics[name])
            except NodeExistsError:
                pass
            count = n
        else:
            count = len(self.cache.topics[name].partitions)
        await self._wait_visible({name: count}, 15000)

    # ----------------------------------------------------------------- DeleteTopics
    async def delete_topics(self, targets, timeout_ms, quota=None):
        q = self._quota(quota)
        if not self._broker_cfg()["delete.topic.enable"]:
            return limits.results(topic_requests.deletion_disabled(targets), q)
        results, pending = [], []
        md = self.view_for_create()
        for name, topic_id in targets:
            res = topic_requests.delete_result(name, topic_id)
            try:
                t = topic_requests.delete_target(md, res, name, topic_id)
                if not q.try_record(len(t.partitions)):
                    raise MetadataError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_MESSAGE)
                try:
                    await self._call("create_async", f"{zkdata.DELETE_TOPICS}/{t.name}", b"",
                                     makepath=True)
                except NodeExistsError:
                    pass
                pending.append(t.name)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            results.append(res)
        deadline = time.monotonic() + max(0, min(timeout_ms, WAIT_CAP_MS)) / 1000
        while pending and time.monotonic() < deadline:
            self._reload_soon(zkdata.TOPICS, zkdata.DELETE_TOPICS)
            await asyncio.sleep(POLL_S)
            pending = [n for n in pending if not self._deletion_visible(n)]
        for res in results:
            if res["name"] in pending and res["error_code"] == 0 and timeout_ms > 0:
                res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                res["error_message"] = "Timed out waiting for the topic deletion."
        return limits.results(results, q)

    def _deletion_visible(self, name: str) -> bool:
        """DeleteTopics is answered once the topic left this broker's view and its znode
        is gone, or, while a replica is offline, once it left the view (Kafka answers when
        the metadata no longer has it; the deletion then waits for that replica)."""
        if name in self._metadata().topics:
            return False
        ta = self.cache.topics.get(name)
        return ta is None or any(r not in self.cache.brokers for ar in ta.partitions.values() for r in ar)

    # ----------------------------------------------------------------- CreatePartitions
    async def create_partitions(self, specs, validate_only, timeout_ms, quota=None):
        q = self._quota(quota)
        results, grown = [], {}
        seen = set()
        growth = model.PartitionGrowth(self.view_for_create(), self._caps())
        for s in specs:
            res = {"name": s["name"], "error_code": 0, "error_message": None}
            try:
                if s["name"] in seen:
                    raise MetadataError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
                seen.add(s["name"])
                if s["name"] in self.cache.deleting:
                    raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                        f"The topic {s['name']} is queued for deletion.")
                t = growth.grow(s["name"], s["count"], s["assignments"],
                                admit=None if validate_only else q.try_record)
                if not validate_only:
                    await self._write_partitions(t)
                    grown[t.name] = len(t.partitions)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            results.append(res)
        if grown and timeout_ms > 0:
            await self._wait_visible(grown, timeout_ms)
        return limits.results(results, q)

    async def _write_partitions(self, t: model.Topic) -> None:
        """The grown assignment: fenced, conditional on the topic znode's version."""
        ctl = self.controllership
        txn = ctl.fenced()
        txn.set_data(zkdata.topic_path(t.name), zkdata.topic_json(t.topic_id, t.assignment()),
                     version=self.cache.topic_versions.get(t.name, -1))
        results = await ctl.commit(txn)
        if results is None:
            await self.cache.load_controller()
            raise MetadataError(ErrorCode.NOT_CONTROLLER,
                                "The controller changed while adding partitions; retry.")
        if isinstance(results[0], BadVersionError):
            raise MetadataError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                f"Topic {t.name} changed concurrently; retry.")
        if isinstance(results[0], Exception):
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {t.name} is gone.")
        await self.cache.load_topic(t.name)

    # ----------------------------------------------------------------- AlterConfigs
    async def alter_configs(self, resources, incremental, validate_only):
        """resources: [(type, name, [(key, op, value)])] -> [(type, name, code, message)]."""
        async def alter_topic_configs(name, ops):
            new_md = alter_topic(self.view_for_create(), self._broker_cfg(), name, ops,
                                 incremental, validate_only)
            if not validate_only:
                await self._write_topic_config(name, dict(new_md.topics[name].configs))
        return await alter_each(resources, alter_topic_configs, lambda name, ops: self._alter_broker(
            name, ops, incremental, validate_only))

    async def _write_topic_config(self, name: str, cfg: dict) -> None:
        path = zkdata.topic_config_path(name)
        try:
            await self._call("set_async", path, zkdata.config_json(cfg))
        except NoNodeError:
            await self._call("create_async", path, zkdata.config_json(cfg), makepath=True)
        await self._call("create_async", f"{zkdata.CONFIG_CHANGES}/config_change_",
                         zkdata.config_change_json(f"topics/{name}"), sequence=True)
        self.cache.configs[name] = cfg

    # ----------------------------------------------------------------- producer ids
    async def allocate_producer_id(self) -> int:
        return await self.producer_ids.allocate()

    async def _claim_producer_id_block(self) -> int:
        """Claim the next block of /latest_producer_id_block (CAS on its version)."""
        while True:
            data, stat = await self._call("get_async", zkdata.PRODUCER_ID_BLOCK)
            start = zkdata.next_producer_id_block_start(data)
            try:
                await self._call("set_async", zkdata.PRODUCER_ID_BLOCK,
                                 zkdata.producer_id_block_json(self.broker_id, start),
                                 version=stat.version)
                return start
            except BadVersionError:
                continue
