"""A topic's log settings (`LogConfig`): Kafka's topic config names, read from topic
configs and from the broker's `log.`-prefixed defaults; the log (storage/log.py), the
cleaner and the validator read them."""
from __future__ import annotations

from dataclasses import dataclass, fields

LONG_MAX = 2**63 - 1


@dataclass
class LogConfig:
    """Topic-level log settings; field = Kafka topic config name with '.' -> '_'."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    # record formats (storage/convert.py): broker-side recompression, legacy timestamp bound
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    message_timestamp_difference_max_ms: int = LONG_MAX
    preallocate: bool = False       # size a new active segment's file to segment.bytes

    @classmethod
    def from_properties(cls, props: dict, base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka topic config names (`segment.bytes`, ...); unknown keys ignored.

        Broker-level `log.`-prefixed names (`log.segment.bytes`, `log.retention.ms`,
        `log.flush.interval.messages`, ...) are accepted too.
        """
        values = dict(vars(base)) if base else {}
        names = {f.name: f for f in fields(cls)}
        aliases = {"log.flush.interval.messages": "flush_messages",
                   "log.flush.interval.ms": "flush_ms", "log.roll.ms": "segment_ms",
                   "log.roll.jitter.ms": "segment_jitter_ms",
                   "log.index.size.max.bytes": "segment_index_bytes",
                   "message.max.bytes": "max_message_bytes",
                   "log.message.timestamp.type": "message_timestamp_type",
                   "log.cleaner.delete.retention.ms": "delete_retention_ms",
                   "log.cleaner.min.compaction.lag.ms": "min_compaction_lag_ms",
                   "log.cleaner.max.compaction.lag.ms": "max_compaction_lag_ms",
                   "log.cleaner.min.cleanable.ratio": "min_cleanable_dirty_ratio",
                   "log.segment.delete.delay.ms": "file_delete_delay_ms"}
        for key, raw in props.items():
            name = aliases.get(key)
            if name is None:
                k = key[4:] if key.startswith("log.") else key
                name = k.replace(".", "_")
            f = names.get(name)
            if f is None:
                continue
            if f.type in ("int", int):
                values[name] = int(raw)
            elif f.type in ("float", float):
                values[name] = float(raw)
            elif f.type in ("bool", bool):
                values[name] = raw if isinstance(raw, bool) else str(raw).lower() == "true"
            else:
                values[name] = str(raw)
        return cls(**values)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
