"""The group coordinator's configuration: a typed, frozen view of the config table.

`GroupConfig.from_config(config)` reads Kafka's group.* / offsets.* keys from a
`BrokerConfig` (mpbroker/config.py: the key table holds every default), or from a plain
mapping of keys (tests), which is read over the table's defaults, validated as a broker's
properties are. Built once per worker (workers/groups/service.py) and handed to every
`GroupCoordinator` of it. `offsets.topic.num.partitions` is not here: the partition count
is read from the worker's metadata at every check (see CoordinatorBase.num_partitions).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

from mpbroker.config import BrokerConfig
from storage import codecs
from workers.groups.assignors import assignor_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int           # group.min.session.timeout.ms
    max_session_timeout_ms: int           # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int       # group.initial.rebalance.delay.ms
    max_group_size: int                   # group.max.size
    offsets_retention_ms: int             # offsets.retention.minutes
    retention_check_interval_ms: int      # offsets.retention.check.interval.ms
    max_metadata_size: int                # offset.metadata.max.bytes
    consumer_session_timeout_ms: int      # group.consumer.session.timeout.ms (KIP-848)
    consumer_heartbeat_interval_ms: int   # group.consumer.heartbeat.interval.ms
    consumer_max_size: int                # group.consumer.max.size
    consumer_assignors: tuple[str, ...]   # group.consumer.assignors, the first the default
    commit_required_acks: int             # offsets.commit.required.acks
    commit_timeout_ms: int                # offsets.commit.timeout.ms
    load_buffer_bytes: int                # offsets.load.buffer.size
    compression: int                      # offsets.topic.compression.codec

    @classmethod
    def from_config(cls, config: BrokerConfig | Mapping) -> GroupConfig:
        if not isinstance(config, BrokerConfig):
            config = BrokerConfig(dict(config))
        return cls(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_group_size=config["group.max.size"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60 * 1000,
            retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            max_metadata_size=config["offset.metadata.max.bytes"],
            consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            consumer_max_size=config["group.consumer.max.size"],
            consumer_assignors=tuple(assignor_names(config["group.consumer.assignors"])),
            commit_required_acks=config["offsets.commit.required.acks"],
            commit_timeout_ms=config["offsets.commit.timeout.ms"],
            load_buffer_bytes=config["offsets.load.buffer.size"],
            compression=_codec(config["offsets.topic.compression.codec"]))


def _codec(value: int) -> int:
    """offsets.topic.compression.codec: Kafka's compression type id (0 none, 1 gzip,
    2 snappy, 3 lz4, 4 zstd); anything else writes uncompressed batches."""
    if not codecs.NONE <= value <= codecs.ZSTD:
        log.warning("offsets.topic.compression.codec=%r is not a compression type id; "
                    "group records are written uncompressed", value)
        return codecs.NONE
    return value
