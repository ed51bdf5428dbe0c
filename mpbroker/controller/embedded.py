"""The embedded controller: the one writer of cluster metadata when no ZooKeeper is set.

It applies the pure changes of `mpbroker.metadata.model` (create/delete topics, add
partitions, set configs, register brokers), persists each new metadata with
`MetadataStore` (tmp + fsync + rename, in `<log.dirs[0]>/__mpbroker_metadata/`) *before*
anyone sees it, then pushes it to the workers (`apply_metadata`), which ignore a push
older than what they hold. Producer id blocks are handed out from the same store, so
an id is never given twice, even across restarts (ZooKeeper's
`/latest_producer_id_block` plays this role in cluster mode).

The worker-facing methods are coroutines so that the same calls can cross a process
boundary later (multiprocess runtime) without the handlers changing.

Limits on what one request may ask (issue #15): CreateTopics / CreatePartitions /
DeleteTopics take an optional `quota = (client_id, strict)` and are counted in the
KIP-599 controller mutation quota (`mpbroker.metadata.quota`, `controller.mutation.rate`);
their results are a `MutationResults` list carrying `throttle_time_ms`. One request may
create at most 9,999 partitions (KRaft's bound) and no change may pass
`max.broker.partitions` / `max.partitions` (POLICY_VIOLATION); `max.broker.partitions`
is lowered to what the workers' RLIMIT_NOFILE can hold (`fd_ceiling`; in cluster mode
this broker's limit stands in for every broker's). Topic creation is linear
in the number of topics (`model.TopicBatch`) and yields to the event loop every
`YIELD_EVERY` topics so that the controller's heartbeat keeps beating; the mutations hold
one lock, so a change never interleaves with another.
"""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import resource
from dataclasses import replace

from mpbroker import config as configmod
from mpbroker.metadata import model, store
from mpbroker.metadata.model import INTERNAL_TOPICS, MetadataError
from mpbroker.metadata.quota import THROTTLING_MESSAGE, MutationQuotas, MutationResults
from mpbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
YIELD_EVERY = 256        # topics created between two yields to the event loop (heartbeats)
FDS_PER_PARTITION = 6    # descriptors a worker holds for one new partition (measured)
FD_RESERVE = 1024        # descriptors a worker keeps for connections, channels, rolls


def fd_ceiling(workers: int, soft_limit: int | None = None) -> tuple[int | None, str]:
    """(the most partitions this broker's workers can keep open, a note naming why) or
    (None, "") when the file descriptor limit does not bind. A worker keeps about
    `FDS_PER_PARTITION` descriptors per partition (segment, offset and time index, their
    checkpoint files) and needs `FD_RESERVE` for connections and channels; past its
    RLIMIT_NOFILE it can open nothing, connections included (issue #15)."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit < 0:
        return None, ""
    ceiling = max(1, workers * max(0, soft_limit - FD_RESERVE) // FDS_PER_PARTITION)
    return ceiling, (f"max.broker.partitions, lowered to what RLIMIT_NOFILE={soft_limit} allows "
                     f"{workers} worker(s) at {FDS_PER_PARTITION} descriptors a partition")


def internal_topic_spec(cfg, name: str) -> tuple[int, int, dict]:
    """(partitions, replication factor, topic configs) of an internal topic, from the
    broker keys Kafka uses for them (offsets.topic.*, transaction.state.log.*)."""
    if name == "__consumer_offsets":
        return (cfg["offsets.topic.num.partitions"], cfg["offsets.topic.replication.factor"],
                {"cleanup.policy": "compact", "compression.type": "producer",
                 "segment.bytes": str(cfg["offsets.topic.segment.bytes"])})
    return (cfg["transaction.state.log.num.partitions"],
            cfg["transaction.state.log.replication.factor"],
            {"cleanup.policy": "compact", "compression.type": "uncompressed",
             "min.insync.replicas": str(cfg["transaction.state.log.min.isr"]),
             "segment.bytes": str(cfg["transaction.state.log.segment.bytes"])})


class EmbeddedController:
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
        self._pid_path = os.path.join(self.log_dir, "__mpbroker_metadata", "producer-id-block.json")
        self._pid_next, self._pid_end = 0, 0
        self._dynamic_path = os.path.join(self.log_dir, "__mpbroker_metadata", "broker-configs.json")
        self._dynamic = self._load_json(self._dynamic_path, {"broker": {}, "default": {}})
        self._broker_cfg = cfg.with_dynamic(broker=self._dynamic["broker"],
                                            default=self._dynamic["default"])
        self._init_limits()

    # ----------------------------------------------------------------- limits
    def _init_limits(self) -> None:
        """The quota buckets and the mutation lock (the ZooKeeper controller calls this too)."""
        self.quotas = MutationQuotas(window_num=self.cfg["controller.quota.window.num"],
                                     window_size_s=self.cfg["controller.quota.window.size.seconds"])
        self._mutating = asyncio.Lock()
        self._configs_cache: tuple = (None, {})    # (broker config, {overrides: described})
        self._fd_ceiling, self._fd_note = fd_ceiling(self.cfg.num_workers)
        if self._fd_ceiling is not None and self._fd_ceiling < self.cfg["max.broker.partitions"]:
            log.warning("max.broker.partitions=%d is more than the file descriptor limit allows; "
                        "using %d (%s)", self.cfg["max.broker.partitions"], self._fd_ceiling,
                        self._fd_note)

    def _quota(self, quota):
        """The request's MutationQuota: `quota` is (client_id, strict) or None (not
        counted); the rate is read now, so an AlterConfigs applies at once."""
        self.quotas.configure(self._broker_cfg["controller.mutation.rate"])
        client_id, strict = quota if quota is not None else (None, False)
        return self.quotas.quota(client_id, bool(strict))

    def _limits(self) -> model.PartitionLimits:
        c = self._broker_cfg
        configured = c["max.broker.partitions"]
        if self._fd_ceiling is not None and self._fd_ceiling < configured:
            return model.PartitionLimits(self._fd_ceiling, c["max.partitions"], self._fd_note)
        return model.PartitionLimits(configured, c["max.partitions"])

    def _requested_partitions(self, specs) -> int:
        default = self.cfg["num.partitions"]
        return sum(len(s["assignments"]) if s.get("assignments")
                   else (default if s["num_partitions"] == -1 else max(0, s["num_partitions"]))
                   for s in specs)

    @staticmethod
    def _results(results: list, q) -> MutationResults:
        out = MutationResults(results)
        out.throttle_time_ms = q.throttle_time_ms()
        return out

    # ----------------------------------------------------------------- plumbing
    @staticmethod
    def _load_json(path: str, default):
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return default

    def _commit(self, md: model.ClusterMetadata, *, reserve: bool = True) -> None:
        """`reserve=False` for growth (CreateTopics, internal topics, CreatePartitions):
        on a full disk it fails (KAFKA_STORAGE_ERROR) and leaves the space reserve to
        DeleteTopics and restarts (storage/space_reserve.py)."""
        self.store.save(md, reserve=reserve)
        self.md = md
        for w in self.workers:
            w.apply_metadata(md)

    def attach_worker(self, worker) -> None:
        self.workers.append(worker)

    def metadata(self) -> model.ClusterMetadata:
        return self.md

    def broker_config(self) -> configmod.BrokerConfig:
        return self._broker_cfg

    def register_broker(self, broker_id: int, host: str, port: int, rack=None) -> None:
        if broker_id < 0:
            broker_id = self.broker_id
        md = model.register_broker(self.md, model.Broker(broker_id, host, port, rack))
        self._commit(model.set_controller(md, broker_id))

    def close(self) -> None:
        pass

    def _topic_defaults(self) -> dict:
        return {"default_partitions": self.cfg["num.partitions"],
                "default_replication_factor": self.cfg["default.replication.factor"]}

    # ----------------------------------------------------------------- topics
    async def create_topics(self, specs: list[dict], validate_only: bool, timeout_ms: int,
                            quota=None):
        async with self._mutating:
            return await self._create_topics(specs, validate_only, quota)

    async def _create_topics(self, specs, validate_only, quota):
        q = self._quota(quota)
        results = []
        if self._requested_partitions(specs) > model.MAX_PARTITIONS_PER_REQUEST:
            for s in specs:     # KRaft refuses the whole request
                res = self._create_result(s["name"])
                res["error_code"] = ErrorCode.POLICY_VIOLATION
                res["error_message"] = model.EXCESSIVE_PARTITIONS_MESSAGE
                results.append(res)
            return self._results(results, q)
        batch = model.TopicBatch(self.md, self._limits())
        check = model.TopicBatch(self.md, self._limits()) if validate_only else batch
        for i, s in enumerate(specs):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            res = self._create_result(s["name"])
            try:
                topic = self._create_in(check, s, self._check_create_spec(s),
                                        None if validate_only else q.try_record)
            except MetadataError as e:
                res["error_code"], res["error_message"] = e.code, e.message
            except configmod.ConfigError as e:
                res["error_code"], res["error_message"] = ErrorCode.INVALID_CONFIG, str(e)
            else:
                self._fill_created(res, topic)
            results.append(res)
        md = batch.result()
        if md is not self.md:
            self._commit(md, reserve=False)
        return self._results(results, q)

    @staticmethod
    def _create_result(name: str) -> dict:
        """A CreateTopics result entry before the outcome is known."""
        return {"name": name, "topic_id": bytes(16), "error_code": 0, "error_message": None,
                "num_partitions": -1, "replication_factor": -1, "configs": None}

    @staticmethod
    def _check_create_spec(spec: dict) -> dict:
        """The first checks of one CreateTopics entry (MetadataError when Kafka refuses
        it); returns its configs. Shared with the ZooKeeper controller."""
        if spec["name"] in INTERNAL_TOPICS:
            raise MetadataError(ErrorCode.INVALID_REQUEST,
                                f"Creation of internal topic {spec['name']} is prohibited.")
        configs = dict(spec["configs"])
        if any(v is None for v in configs.values()):
            raise MetadataError(ErrorCode.INVALID_CONFIG,
                                "Null value not supported for topic configs")
        return configs

    def _create_in(self, batch: model.TopicBatch, spec: dict, configs: dict, admit=None):
        """Add the topic of a checked CreateTopics entry to `batch` and return it
        (MetadataError or ConfigError when Kafka would refuse it; `admit` is the
        quota's say, asked last)."""
        return batch.create(spec["name"], spec["num_partitions"], spec["replication_factor"],
                            spec["assignments"] or None, configs, admit=admit,
                            **self._topic_defaults())

    def _fill_created(self, res: dict, topic) -> None:
        res.update(topic_id=topic.topic_id, num_partitions=len(topic.partitions),
                   replication_factor=topic.replication_factor,
                   configs=self._created_configs(topic))

    def _created_configs(self, topic) -> list[dict]:
        # Describing a topic's configs costs milliseconds and depends only on the broker
        # config and the overrides: topics created alike share one (read-only) answer.
        cfg_obj, cache = self._configs_cache
        if cfg_obj is not self._broker_cfg or len(cache) > 256:
            cache = {}
            self._configs_cache = (self._broker_cfg, cache)
        key = tuple(sorted(topic.configs.items()))
        out = cache.get(key)
        if out is None:
            entries = configmod.describe_topic_configs(self._broker_cfg, topic.configs)
            out = cache[key] = [{"name": e["name"], "value": e["value"],
                                 "read_only": e["read_only"],
                                 "config_source": e["config_source"],
                                 "is_sensitive": e["is_sensitive"]} for e in entries]
        return out

    async def ensure_internal_topic(self, name: str) -> None:
        """__consumer_offsets / __transaction_state, created on first use as Kafka does
        (not counted against the partition caps: the coordinators need them)."""
        async with self._mutating:
            self._ensure_internal_topic(name)

    def _ensure_internal_topic(self, name: str) -> None:
        if name in self.md.topics:
            return
        n, rf, configs = internal_topic_spec(self.cfg, name)
        rf = min(rf, max(1, len(self.md.brokers)))
        # min.insync.replicas capped with it: the coordinator's acks -1 appends need it met
        if "min.insync.replicas" in configs:
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), rf))
        md = model.create_topic(self.md, name, n, rf, None, configs, **self._topic_defaults())
        md = replace(md, topics={**md.topics, name: replace(md.topics[name], is_internal=True)})
        self._commit(md, reserve=False)

    async def delete_topics(self, targets: list[tuple], timeout_ms: int, quota=None):
        async with self._mutating:
            return self._delete_topics(targets, quota)

    def _delete_topics(self, targets, quota):
        q = self._quota(quota)
        if not self.cfg["delete.topic.enable"]:
            return self._results([{"name": n, "topic_id": tid or bytes(16),
                                   "error_code": ErrorCode.TOPIC_DELETION_DISABLED,
                                   "error_message": "Topic deletion is disabled."}
                                  for n, tid in targets], q)
        results, gone = [], {}      # ordered set of the names to delete
        md = self.md
        for name, topic_id in targets:
            res = {"name": name, "topic_id": topic_id or bytes(16), "error_code": 0,
                   "error_message": None}
            try:
                if name is not None and topic_id not in (None, bytes(16)):
                    raise MetadataError(ErrorCode.INVALID_REQUEST,
                                        "Topic name and topic id cannot both be specified.")
                t = md.topic(name) if name is not None else md.topic_by_id(topic_id)
                res["name"], res["topic_id"] = t.name, t.topic_id
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
        return self._results(results, q)

    async def create_partitions(self, specs: list[dict], validate_only: bool, timeout_ms: int,
                                quota=None):
        async with self._mutating:
            return await self._create_partitions(specs, validate_only, quota)

    async def _create_partitions(self, specs, validate_only, quota):
        q = self._quota(quota)
        results = []
        growth = model.PartitionGrowth(self.md, self._limits())
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
        return self._results(results, q)

    # ----------------------------------------------------------------- configs
    async def alter_configs(self, resources: list[tuple], incremental: bool, validate_only: bool):
        """resources: [(type, name, [(key, op, value)])] -> [(type, name, code, message)]."""
        async with self._mutating:
            return self._alter_configs(resources, incremental, validate_only)

    def _alter_configs(self, resources, incremental, validate_only):
        out = []
        md = self.md
        for rtype, rname, ops in resources:
            try:
                if rtype == TOPIC:
                    md = self._alter_topic(md, rname, ops, incremental, validate_only)
                elif rtype == BROKER:
                    self._alter_broker(rname, ops, incremental, validate_only)
                else:
                    raise MetadataError(ErrorCode.INVALID_REQUEST,
                                        f"Unsupported resource type {rtype}")
            except MetadataError as e:
                out.append((rtype, rname, e.code, e.message))
            except configmod.ConfigError as e:
                out.append((rtype, rname, ErrorCode.INVALID_CONFIG, str(e)))
            else:
                out.append((rtype, rname, 0, None))
        if md is not self.md:
            self._commit(md)
        return out

    @staticmethod
    def _apply_ops(current: dict, ops, incremental: bool, keys=None, base=None,
                   kind: str = "topic") -> dict:
        """The overrides after `ops`. APPEND/SUBTRACT (incremental only) work on the
        keys whose type in `keys` (a ConfigKey table) is LIST, starting from the
        override or else `base(key)` (the default), as Kafka's ZooKeeper-mode
        prepareIncrementalConfigs: another known key is INVALID_REQUEST, an unknown
        one INVALID_CONFIG."""
        new = dict(current) if incremental else {}
        for key, op, value in ops:
            if op == SET:
                if value is None and incremental:
                    raise MetadataError(ErrorCode.INVALID_REQUEST,
                                        f"Null value not supported for : {key}")
                if value is None:
                    new.pop(key, None)
                else:
                    new[key] = value
            elif op == DELETE:
                new.pop(key, None)
            elif op in (APPEND, SUBTRACT):
                new[key] = EmbeddedController._list_op(new, key, op, value, keys or {},
                                                       base, kind)
            else:
                raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
        return new

    @staticmethod
    def _list_op(new: dict, key: str, op: int, value, keys, base, kind: str) -> str:
        spec = keys.get(key)
        if spec is None:
            raise MetadataError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {key}")
        verb = "append" if op == APPEND else "subtract"
        if spec.type != configmod.ConfigType.LIST:
            raise MetadataError(ErrorCode.INVALID_REQUEST,
                                f"Config value {verb} is not allowed for config key: {key}")
        start = new[key] if key in new else (base(key) if base else "")
        items = [x.strip() for x in (start or "").split(",") if x.strip()]
        vals = [x.strip() for x in (value or "").split(",") if x.strip()]
        if op == APPEND:
            items += [v for v in vals if v not in items]
        else:
            items = [x for x in items if x not in vals]
        return ",".join(items)

    def _alter_topic(self, md, name, ops, incremental, validate_only):
        topic = md.topic(name)
        keys = [k for k, _, _ in ops]
        if len(keys) != len(set(keys)):
            raise MetadataError(ErrorCode.INVALID_REQUEST,
                                "Error due to duplicate config keys")
        defaults = self._broker_cfg.log_config_defaults()
        new = self._apply_ops(topic.configs, ops, incremental, configmod.TOPIC_CONFIGS,
                              lambda k: configmod.to_string(defaults.get(k)))
        configmod.effective_topic_config(self._broker_cfg, new)  # validates, ConfigError
        new_md = model.set_topic_configs(md, name, new)
        return md if validate_only else new_md

    def _alter_broker(self, name, ops, incremental, validate_only):
        per_broker = name != ""
        if per_broker and name != str(self.broker_id):
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id {name}")
        layer = "broker" if per_broker else "default"
        new = self._apply_ops(self._dynamic[layer], ops, incremental, configmod.BROKER_CONFIGS,
                              lambda k: configmod.to_string(self.cfg.default_of(k)), "broker")
        configmod.validate_dynamic_update(new, per_broker)
        if validate_only:
            return
        self._dynamic[layer] = new
        self._broker_cfg = self.cfg.with_dynamic(broker=self._dynamic["broker"],
                                                 default=self._dynamic["default"])
        store.atomic_write(self._dynamic_path, json.dumps(self._dynamic).encode())

    # ----------------------------------------------------------------- producer ids
    async def allocate_producer_id(self) -> int:
        if self._pid_next >= self._pid_end:
            block = self._load_json(self._pid_path, {"next_block_start": 0})
            start = block["next_block_start"]
            store.atomic_write(self._pid_path,
                               json.dumps({"next_block_start": start + PRODUCER_ID_BLOCK}).encode())
            self._pid_next, self._pid_end = start, start + PRODUCER_ID_BLOCK
        pid = self._pid_next
        self._pid_next += 1
        return pid

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
        if leader_id != st.leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, st
        if leader_epoch != st.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, st
        if partition_epoch != st.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION, st
        new_isr = tuple(new_isr)
        if leader_id not in new_isr or not set(new_isr) <= set(st.replicas) \
                or len(set(new_isr)) != len(new_isr):
            return ErrorCode.INVALID_REQUEST, st
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
        from mpbroker.controller import broker_requests
        parts = broker_requests.partitions(api_key, version, body)
        return broker_requests.response(api_key, version, parts, {}, ErrorCode.STALE_CONTROLLER_EPOCH)
