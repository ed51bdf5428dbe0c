"""The parts of CreateTopics / DeleteTopics that both controllers answer alike (pure over
values; the embedded controller commits to its store, the ZooKeeper controller writes
znodes). Result entries are dicts shaped as the responses' entries."""
from __future__ import annotations

from mpbroker import config as configmod
from mpbroker.metadata import model
from mpbroker.metadata.model import INTERNAL_TOPICS, MetadataError
from mpbroker.protocol.errors import ErrorCode


def topic_defaults(cfg) -> dict:
    """The model's defaults for a topic created without a count or a replication factor."""
    return {"default_partitions": cfg["num.partitions"],
            "default_replication_factor": cfg["default.replication.factor"]}


def internal_topic_spec(cfg, name: str) -> tuple[int, int, dict]:
    """(partitions, replication factor, topic configs) of an internal topic, from the
    broker keys Kafka uses for them (offsets.topic.*, transaction.state.log.*)."""
    if name == model.OFFSETS_TOPIC:
        return (cfg["offsets.topic.num.partitions"], cfg["offsets.topic.replication.factor"],
                {"cleanup.policy": "compact", "compression.type": "producer",
                 "segment.bytes": str(cfg["offsets.topic.segment.bytes"])})
    return (cfg["transaction.state.log.num.partitions"],
            cfg["transaction.state.log.replication.factor"],
            {"cleanup.policy": "compact", "compression.type": "uncompressed",
             "min.insync.replicas": str(cfg["transaction.state.log.min.isr"]),
             "segment.bytes": str(cfg["transaction.state.log.segment.bytes"])})


def create_result(name: str) -> dict:
    """A CreateTopics result entry before the outcome is known."""
    return {"name": name, "topic_id": bytes(16), "error_code": 0, "error_message": None,
            "num_partitions": -1, "replication_factor": -1, "configs": None}


def refuse_oversized(specs: list[dict], cfg) -> list[dict] | None:
    """KRaft refuses a whole request for more than MAX_PARTITIONS_PER_REQUEST partitions:
    the result entries of that refusal, or None when the request is within the bound."""
    default = cfg["num.partitions"]
    requested = sum(len(s["assignments"]) if s.get("assignments")
                    else (default if s["num_partitions"] == -1 else max(0, s["num_partitions"]))
                    for s in specs)
    if requested <= model.MAX_PARTITIONS_PER_REQUEST:
        return None
    out = []
    for s in specs:
        res = create_result(s["name"])
        res["error_code"] = ErrorCode.POLICY_VIOLATION
        res["error_message"] = model.EXCESSIVE_PARTITIONS_MESSAGE
        out.append(res)
    return out


def check_create_spec(spec: dict) -> dict:
    """The first checks of one CreateTopics entry (MetadataError when Kafka refuses it);
    returns its configs."""
    if spec["name"] in INTERNAL_TOPICS:
        raise MetadataError(ErrorCode.INVALID_REQUEST,
                            f"Creation of internal topic {spec['name']} is prohibited.")
    configs = dict(spec["configs"])
    if any(v is None for v in configs.values()):
        raise MetadataError(ErrorCode.INVALID_CONFIG,
                            "Null value not supported for topic configs")
    return configs


def create_in(batch: model.TopicBatch, spec: dict, configs: dict, cfg, admit=None):
    """Add the topic of a checked CreateTopics entry to `batch` and return it
    (MetadataError or ConfigError when Kafka would refuse it; `admit` is the quota's
    say, asked last)."""
    return batch.create(spec["name"], spec["num_partitions"], spec["replication_factor"],
                        spec["assignments"] or None, configs, admit=admit,
                        **topic_defaults(cfg))


class CreatedConfigs:
    """The `configs` of CreateTopics results. Describing a topic's configs costs
    milliseconds and depends only on the broker config and the overrides: topics
    created alike share one (read-only) answer."""

    def __init__(self):
        self._cache: tuple = (None, {})    # (broker config, {overrides: described})

    def fill(self, res: dict, topic, broker_cfg) -> None:
        res.update(topic_id=topic.topic_id, num_partitions=len(topic.partitions),
                   replication_factor=topic.replication_factor,
                   configs=self.describe(topic, broker_cfg))

    def describe(self, topic, broker_cfg) -> list[dict]:
        cfg_obj, cache = self._cache
        if cfg_obj is not broker_cfg or len(cache) > 256:
            cache = {}
            self._cache = (broker_cfg, cache)
        key = tuple(sorted(topic.configs.items()))
        out = cache.get(key)
        if out is None:
            entries = configmod.describe_topic_configs(broker_cfg, topic.configs)
            out = cache[key] = [{"name": e["name"], "value": e["value"],
                                 "read_only": e["read_only"],
                                 "config_source": e["config_source"],
                                 "is_sensitive": e["is_sensitive"]} for e in entries]
        return out


def deletion_disabled(targets) -> list[dict]:
    """DeleteTopics with delete.topic.enable=false: every target refused."""
    return [{"name": n, "topic_id": tid or bytes(16),
             "error_code": ErrorCode.TOPIC_DELETION_DISABLED,
             "error_message": "Topic deletion is disabled."} for n, tid in targets]


def delete_result(name, topic_id) -> dict:
    return {"name": name, "topic_id": topic_id or bytes(16), "error_code": 0,
            "error_message": None}


def delete_target(md: model.ClusterMetadata, res: dict, name, topic_id):
    """The topic a DeleteTopics entry names (by name or id, not both; MetadataError
    otherwise); `res` gets its name and id."""
    if name is not None and topic_id not in (None, bytes(16)):
        raise MetadataError(ErrorCode.INVALID_REQUEST,
                            "Topic name and topic id cannot both be specified.")
    t = md.topic(name) if name is not None else md.topic_by_id(topic_id)
    res["name"], res["topic_id"] = t.name, t.topic_id
    return t
