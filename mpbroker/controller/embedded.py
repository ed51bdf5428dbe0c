"""The embedded controller: the one writer of cluster metadata when no ZooKeeper is set.

It applies the pure changes of `mpbroker.metadata.model` (create/delete topics, add
partitions, set configs, register brokers), persists each new metadata with
`MetadataStore` (tmp + fsync + rename, in `<log.dirs[0]>/__mpbroker_metadata/`) *before*
anyone sees it, then pushes it to the workers (`apply_metadata`), which ignore a push
older than what they hold. Producer id blocks are handed out from the same store, so
an id is never given twice, even across restarts (ZooKeeper's
`/latest_producer_id_block` plays this role in cluster mode).

The worker-facing methods are coroutines: the controller process serves them to its
workers over their channels (the ZooKeeper controller's need to await).

Limits on what one request may ask (issue #15): `limits.py` (quota, partition caps);
one request may create at most 9,999 partitions (KRaft's bound). What both controllers
answer alike lives in `topic_requests.py`, `config_ops.py`, `isr_change.py` and
`producer_ids.py`; the ZooKeeper controller (`zk/`) composes the same pieces. Topic
creation is linear in the number of topics (`model.TopicBatch`) and yields to the event
loop every `YIELD_EVERY` topics so that the controller's heartbeat keeps beating; the
mutations hold one lock, so a change never interleaves with another.
"""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
from dataclasses import replace

from mpbroker import config as configmod
from mpbroker.controller import broker_requests, client_quotas, isr_change, limits
from mpbroker.controller import acl_ops, topic_requests
from mpbroker.controller.config_ops import DynamicBrokerConfigs, alter_each, alter_topic, load_json
from mpbroker.controller.producer_ids import BLOCK_SIZE, ProducerIdBlocks
from mpbroker.controller.worker_facing import WorkerFacing
from mpbroker.metadata import model, scram_users, store
from mpbroker.metadata.model import MetadataError
from mpbroker.metadata.quota import THROTTLING_MESSAGE
from mpbroker.protocol.errors import ErrorCode
from storage.checkpoint import atomic_write

log = logging.getLogger(__name__)

YIELD_EVERY = 256        # topics created between two yields to the event loop (heartbeats)


class EmbeddedController(WorkerFacing):
    active = True       # the one controller of its single-broker cluster (KafkaController's gauge)

    def __init__(self, cfg: configmod.BrokerConfig):
        self.cfg = cfg
        self.log_dir = cfg.log_dirs[0]
        os.makedirs(self.log_dir, exist_ok=True)
        self.store = store.MetadataStore(self.log_dir)
        try:
            md = self.store.load()
        except Exception as e:
            raise configmod.ConfigError(f"cannot read the metadata store in {self.log_dir}: {e}")
        if md is None:
            md = model.new_cluster_metadata()
        try:
            broker_id, cluster_id = store.ensure_meta_properties(
                cfg.log_dirs, cfg.broker_id, md.cluster_id,
                reserved_broker_max_id=cfg["reserved.broker.max.id"],
                generation_enabled=cfg["broker.id.generation.enable"])
        except store.MetadataStoreError as e:
            raise configmod.ConfigError(str(e))
        self.broker_id = broker_id
        self.md = md
        self.workers: list = []
        self._pid_path = os.path.join(self.log_dir, store.METADATA_DIR, "producer-id-block.json")
        self.producer_ids = ProducerIdBlocks(self._claim_producer_id_block)
        self.dynamic = DynamicBrokerConfigs(self.log_dir)
        self._broker_cfg = self.dynamic.over(cfg)
        self.limits = limits.MutationLimits(cfg)
        self.created_configs = topic_requests.CreatedConfigs()
        self._mutating = asyncio.Lock()

    # ----------------------------------------------------------------- plumbing
    def _commit(self, md: model.ClusterMetadata, *, reserve: bool = True) -> None:
        """`reserve=False` for growth (CreateTopics, internal topics, CreatePartitions):
        on a full disk it fails (KAFKA_STORAGE_ERROR) and leaves the space reserve to
        DeleteTopics and restarts (storage/space_reserve.py)."""
        self.store.save(md, reserve=reserve)
        self.md = md
        for w in self.workers:
            w.apply_metadata(md)

    def _quota(self, quota):
        return self.limits.quota(self._broker_cfg, quota, self.md.client_quotas)

    def register_broker(self, broker_id: int, host: str, port: int, rack=None,
                        endpoints: tuple = ()) -> None:
        """`endpoints`: every advertised listener, ((name, host, port), ...)."""
        if broker_id < 0:
            broker_id = self.broker_id
        md = model.register_broker(self.md, model.Broker(broker_id, host, port, rack,
                                                         tuple(endpoints)))
        self._commit(model.set_controller(md, broker_id))

    def close(self) -> None:
        pass

    # ----------------------------------------------------------------- topics
    async def create_topics(self, specs: list[dict], validate_only: bool, timeout_ms: int,
                            quota=None):
        async with self._mutating:
            return await self._create_topics(specs, validate_only, quota)

    async def _create_topics(self, specs, validate_only, quota):
        q = self._quota(quota)
        refused = topic_requests.refuse_oversized(specs, self.cfg)
        if refused is not None:
            return limits.results(refused, q)
        results = []
        caps = self.limits.partitions(self._broker_cfg)
        batch = model.TopicBatch(self.md, caps)
        check = model.TopicBatch(self.md, caps) if validate_only else batch
        for i, s in enumerate(specs):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            res = topic_requests.create_result(s["name"])
            try:
                topic = topic_requests.create_in(check, s, topic_requests.check_create_spec(s), self.cfg,
                                           None if validate_only else q.try_record)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            except configmod.ConfigError as e:
                res["error_code"], res["error_message"] = ErrorCode.INVALID_CONFIG, str(e)
            else:
                self.created_configs.fill(res, topic, self._broker_cfg)
            results.append(res)
        md = batch.result()
        if md is not self.md:
            self._commit(md, reserve=False)
        return limits.results(results, q)

    async def ensure_internal_topic(self, name: str) -> None:
        """__consumer_offsets / __transaction_state, created on first use as Kafka does
        (not counted against the partition caps: the coordinators need them)."""
        async with self._mutating:
            self._ensure_internal_topic(name)

    def _ensure_internal_topic(self, name: str) -> None:
        if name in self.md.topics:
            return
        n, rf, configs = topic_requests.internal_topic_spec(self.cfg, name)
        rf = min(rf, max(1, len(self.md.brokers)))
        # min.insync.replicas capped with it: the coordinator's acks -1 appends need it met
        if "min.insync.replicas" in configs:
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), rf))
        md = model.create_topic(self.md, name, n, rf, None, configs,
                                **topic_requests.topic_defaults(self.cfg))
        md = replace(md, topics={**md.topics, name: replace(md.topics[name], is_internal=True)})
        self._commit(md, reserve=False)

    async def delete_topics(self, targets: list[tuple], timeout_ms: int, quota=None):
        async with self._mutating:
            return self._delete_topics(targets, quota)

    def _delete_topics(self, targets, quota):
        q = self._quota(quota)
        if not self.cfg["delete.topic.enable"]:
            return limits.results(topic_requests.deletion_disabled(targets), q)
        results, gone = [], {}      # ordered set of the names to delete
        md = self.md
        for name, topic_id in targets:
            res = topic_requests.delete_result(name, topic_id)
            try:
                t = topic_requests.delete_target(md, res, name, topic_id)
                if t.name in gone:
                    raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        "This server does not host this topic-partition.")
                if not q.try_record(len(t.partitions)):
                    raise MetadataError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_MESSAGE)
                gone[t.name] = None
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            results.append(res)
        if gone:
            self._commit(model.delete_topics(md, list(gone)))
        return limits.results(results, q)

    async def create_partitions(self, specs: list[dict], validate_only: bool, timeout_ms: int,
                                quota=None):
        async with self._mutating:
            return await self._create_partitions(specs, validate_only, quota)

    async def _create_partitions(self, specs, validate_only, quota):
        q = self._quota(quota)
        results = []
        growth = model.PartitionGrowth(self.md, self.limits.partitions(self._broker_cfg))
        names = collections.Counter(s["name"] for s in specs)
        for i, s in enumerate(specs):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            res = {"name": s["name"], "error_code": 0, "error_message": None}
            try:
                if names[s["name"]] > 1:     # Kafka: every occurrence is refused
                    raise MetadataError(ErrorCode.INVALID_REQUEST,
                                        "Duplicate topic in request.")
                # validate_only still counts against the caps within the request, so
                # that its answer is the one the real request would get
                growth.grow(s["name"], s["count"], s["assignments"],
                            admit=None if validate_only else q.try_record)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            results.append(res)
        if not validate_only:
            md = growth.result()
            if md is not self.md:
                self._commit(md, reserve=False)
        return limits.results(results, q)

    # ----------------------------------------------------------------- configs
    async def alter_configs(self, resources: list[tuple], incremental: bool, validate_only: bool):
        """resources: [(type, name, [(key, op, value)])] -> [(type, name, code, message)]."""
        async with self._mutating:
            md = self.md

            async def alter_topic_configs(name, ops):
                nonlocal md
                md = alter_topic(md, self._broker_cfg, name, ops, incremental, validate_only)
            out = await alter_each(resources, alter_topic_configs, lambda name, ops: self._alter_broker(
                name, ops, incremental, validate_only))
            if md is not self.md:
                self._commit(md)
            return out

    def _alter_broker(self, name, ops, incremental, validate_only) -> None:
        if self.dynamic.alter(self.cfg, self.broker_id, name, ops, incremental, validate_only):
            self._broker_cfg = self.dynamic.over(self.cfg)

    # ----------------------------------------------------------------- SCRAM users (issue 17)
    async def describe_user_scram_credentials(self, users):
        return scram_users.describe(self.md.scram_users, users)

    async def alter_user_scram_credentials(self, deletions, upsertions):
        """-> [(user, code, message)]; the accepted changes are stored, then pushed."""
        async with self._mutating:
            results, changes = scram_users.alter(self.md.scram_users, deletions, upsertions)
            if changes:
                self._commit(model.set_scram_credentials(self.md, changes))
            return results
    # ----------------------------------------------------------------- client quotas (issue #17)
    async def alter_client_quotas(self, entries, validate_only: bool):
        """AlterClientQuotas: [(pairs, ops)] -> [(pairs, code, message)]
        (controller/client_quotas.py); the quotas live in the metadata (and its store)."""
        async with self._mutating:
            new, results, changed = client_quotas.apply(self.md.client_quotas, entries,
                                                        validate_only)
            if changed:
                self._commit(model.set_client_quotas(self.md, new))
            return results
    # ----------------------------------------------------------------- end client quotas

    # ----------------------------------------------------------------- producer ids
    async def allocate_producer_id(self) -> int:
        return await self.producer_ids.allocate()

    async def _claim_producer_id_block(self) -> int:
        start = load_json(self._pid_path, {"next_block_start": 0})["next_block_start"]
        atomic_write(self._pid_path, json.dumps({"next_block_start": start + BLOCK_SIZE}).encode())
        return start

    # ----------------------------------------------------------------- cluster-mode APIs
    # One broker: it is the controller and the only replica, so these are small.
    async def log_dir_failed(self, partitions) -> None:
        """One broker: no other replica can take over a partition in a failed log dir;
        it answers KAFKA_STORAGE_ERROR (workers/worker.py)."""
        return None

    async def alter_partition(self, topic: str, partition: int, leader_id: int, leader_epoch: int,
                              partition_epoch: int, new_isr):
        """A leader changes its ISR -> (error_code, PartitionState | None); see
        docs/INTERFACES.md "Cluster mode" (the ZkController has the same contract)."""
        async with self._mutating:
            return self._alter_partition(topic, partition, leader_id, leader_epoch,
                                         partition_epoch, new_isr)

    def _alter_partition(self, topic, partition, leader_id, leader_epoch, partition_epoch, new_isr):
        t = self.md.topics.get(topic)
        st = t.partitions.get(partition) if t is not None else None
        if st is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        new_isr = tuple(new_isr)
        code = isr_change.check(st.leader, st.leader_epoch, st.partition_epoch, st.replicas,
                                st.isr, leader_id, leader_epoch, partition_epoch, new_isr)
        if code != ErrorCode.NONE:
            return code, st
        self._commit(model.update_partition(self.md, topic, replace(st, isr=new_isr)))
        return ErrorCode.NONE, self.md.topics[topic].partitions[partition]

    async def elect_leaders(self, election_type: int, partitions):
        """ElectLeaders: every replica is this broker, so no election is ever needed."""
        if partitions is None:
            return ErrorCode.NONE, []
        out = []
        for t, p in partitions:
            topic = self.md.topics.get(t)
            if topic is None or p not in topic.partitions:
                out.append((t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."))
            else:
                out.append((t, p, ErrorCode.ELECTION_NOT_NEEDED,
                            "Leader election not needed for topic partition."))
        return ErrorCode.NONE, out

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1):
        """Nothing to move: no other broker could lead (remaining: RF > 1 partitions, none)."""
        if broker_id != self.broker_id:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        return ErrorCode.NONE, []

    async def alter_partition_reassignments(self, moves):
        """One broker: the only valid target is the current assignment (nothing to move)."""
        out = []
        for t, p, target in moves:
            topic = self.md.topics.get(t)
            st = topic.partitions.get(p) if topic is not None else None
            if st is None:
                out.append((t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."))
            elif target is None:
                out.append((t, p, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                            f"Cannot cancel a reassignment of {t}-{p}: none is in progress."))
            elif tuple(target) != st.replicas:
                out.append((t, p, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"The proposed assignment contains non-live brokers: "
                            f"{sorted(set(target) - set(self.md.brokers))}"))
            else:
                out.append((t, p, ErrorCode.NONE, None))
        return ErrorCode.NONE, None, out

    async def list_partition_reassignments(self, partitions):
        return ErrorCode.NONE, None, []

    async def controller_request(self, api_key: int, version: int, body: dict) -> dict:
        """LeaderAndIsr / StopReplica / UpdateMetadata: no other controller governs an
        embedded broker, so every one is refused with STALE_CONTROLLER_EPOCH."""
        parts = broker_requests.partitions(api_key, version, body)
        return broker_requests.response(api_key, version, parts, {}, ErrorCode.STALE_CONTROLLER_EPOCH)

    # ----------------------------------------------------------------- ACLs (issue #17)
    async def create_acls(self, bindings):
        """[AclBinding] -> one {error_code, error_message} each (controller/acl_ops.py)."""
        return await self._change_acls(acl_ops.create_acls, bindings)

    async def delete_acls(self, filters):
        """[AclFilter] -> one {error_code, error_message, matching_acls} each."""
        return await self._change_acls(acl_ops.delete_acls, filters)

    async def _change_acls(self, change, items):
        async with self._mutating:
            acls, results = change(self.md.acls, items)
            if acls != self.md.acls:
                self._commit(model.set_acls(self.md, acls))
            return results
