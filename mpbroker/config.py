"""The config model: broker configs (``server.properties``), topic configs, and
what DescribeConfigs reports about them.

Everything here takes values and returns values; the only file access is
``BrokerConfig.from_file`` (one read of the properties file, for the CLI).

Sources, lowest precedence first (Kafka's ``ConfigSource``)::

    DEFAULT_CONFIG (5)                 the defaults in BROKER_CONFIGS
    STATIC_BROKER_CONFIG (4)           server.properties + --override key=value
    DYNAMIC_DEFAULT_BROKER_CONFIG (3)  cluster-wide dynamic (AlterConfigs, resource "")
    DYNAMIC_BROKER_CONFIG (2)          per-broker dynamic (AlterConfigs, resource "<id>")
    DYNAMIC_TOPIC_CONFIG (1)           a topic's override (topic configs only)

A topic config without an override takes its broker synonym's value
(``segment.bytes`` <- ``log.segment.bytes``, ``retention.ms`` <-
``log.retention.ms`` | ``log.retention.minutes`` | ``log.retention.hours``), derived
exactly as Kafka derives it (``KafkaConfig.logRetentionTimeMillis`` and friends).

Values are parsed as Kafka's ``ConfigDef`` parses them (``Integer.parseInt`` on
the trimmed string, ``true``/``false`` any case, lists split on commas) and bad
values raise ``ConfigError`` with Kafka's ``ConfigException`` message:
``Invalid value x for configuration y: reason``.

mpbroker's own broker keys: ``num.workers`` (default: CPUs usable by this
process), ``worker.cpu.affinity``, ``admin.socket``,
``max.incremental.fetch.session.cache.bytes`` (workers/fetch_session.py), and the free-form prefix
``placement.`` (e.g. ``placement.topic.<topic>=...``), kept as strings for the
supervisor.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence

from mpbroker.ignored_configs import is_ignored

__all__ = [
    "ConfigError", "ConfigKey", "ConfigSource", "ConfigType", "Endpoint", "BrokerConfig",
    "BROKER_CONFIGS", "TOPIC_CONFIGS", "TOPIC_BROKER_SYNONYMS", "PLACEMENT_PREFIX",
    "parse_properties", "parse_overrides", "parse_value", "to_string",
    "validate_topic_config", "effective_topic_config",
    "describe_broker_configs", "describe_topic_configs", "parse_listeners",
]

INT_MAX = 2**31 - 1
INT_MIN = -2**31
LONG_MAX = 2**63 - 1
LONG_MIN = -2**63
SHORT_MAX = 2**15 - 1
SHORT_MIN = -2**15
DOUBLE_MAX = 1.7976931348623157e308
PLACEMENT_PREFIX = "placement."

INVALID_CONFIG = 40      # Kafka's error code for a bad config in a request


class ConfigError(ValueError):
    """Kafka's ConfigException. ``error_code`` is INVALID_CONFIG (40)."""

    error_code = INVALID_CONFIG

    def __init__(self, message: str, name: Optional[str] = None, value: Any = None):
        super().__init__(message)
        self.name = name
        self.value = value

    @classmethod
    def invalid(cls, name: str, value: Any, reason: Optional[str] = None) -> "ConfigError":
        msg = f"Invalid value {value} for configuration {name}"
        if reason is not None:
            msg += f": {reason}"
        return cls(msg, name, value)


class ConfigSource:
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType:
    """Kafka's ConfigDef.Type names, with the ints of DescribeConfigsResponse."""
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9

    NAMES = {1: "BOOLEAN", 2: "STRING", 3: "INT", 4: "SHORT", 5: "LONG", 6: "DOUBLE",
             7: "LIST", 8: "CLASS", 9: "PASSWORD"}


# -------------------------------------------------------------- validators

class Validator:
    def __call__(self, name: str, value: Any) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Range(Validator):
    lo: Optional[float] = None
    hi: Optional[float] = None

    def __call__(self, name, value):
        if value is None:
            raise ConfigError.invalid(name, None, "Value must be non-null")
        if self.lo is not None and value < self.lo:
            raise ConfigError.invalid(name, to_string(value), f"Value must be at least {_num(self.lo)}")
        if self.hi is not None and value > self.hi:
            raise ConfigError.invalid(name, to_string(value), f"Value must be no more than {_num(self.hi)}")

    def __str__(self):
        if self.hi is None:
            return f"[{_num(self.lo)},...]"
        if self.lo is None:
            return f"[...,{_num(self.hi)}]"
        return f"[{_num(self.lo)},...,{_num(self.hi)}]"


def at_least(n):
    return Range(n, None)


def between(lo, hi):
    return Range(lo, hi)


@dataclass(frozen=True)
class ValidString(Validator):
    values: tuple
    case_insensitive: bool = False

    def __call__(self, name, value):
        ok = (value.lower() in (v.lower() for v in self.values)) if self.case_insensitive and value is not None \
            else value in self.values
        if not ok:
            raise ConfigError.invalid(name, value, "String must be one of: " + ", ".join(self.values))

    def __str__(self):
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ValidList(Validator):
    values: tuple

    def __call__(self, name, value):
        for item in value or ():
            ValidString(self.values)(name, item)

    def __str__(self):
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class GzipLevel(Validator):
    # Kafka: -1 (Deflater.DEFAULT_COMPRESSION) or 1..9
    def __call__(self, name, value):
        if value != -1 and not (1 <= value <= 9):
            raise ConfigError.invalid(name, value, "Value must be between 1 and 9, or -1 for the default compression level")

    def __str__(self):
        return "[1,...,9] or -1"


HTTP_LISTENER_RE = re.compile(r"http://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]\s]*):(\d{1,5})/?")


def parse_http_listener(value: str) -> tuple:
    """'http://127.0.0.1:9644' -> ('127.0.0.1', 9644); an empty host is every interface.
    Raises ValueError with the reason."""
    m = HTTP_LISTENER_RE.fullmatch(value.strip())
    if m is None or int(m.group(2)) > 65535:
        raise ValueError("expected http://host:port (port 0..65535)")
    return m.group(1).strip("[]") or "0.0.0.0", int(m.group(2))


@dataclass(frozen=True)
class HttpListener(Validator):
    """metrics.listener: unset, or http://host:port."""
    def __call__(self, name, value):
        if value:
            try:
                parse_http_listener(value)
            except ValueError as e:
                raise ConfigError.invalid(name, value, str(e)) from None

    def __str__(self):
        return "http://host:port"


def _num(x) -> str:
    return _java_double(x) if isinstance(x, float) else str(x)


# -------------------------------------------------------------- definitions

@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: int
    default: Any                     # typed; None = null default
    validator: Optional[Validator]
    importance: str                  # "high" | "medium" | "low"
    doc: str
    update_mode: str = "read-only"   # "read-only" | "per-broker" | "cluster-wide"

    @property
    def sensitive(self) -> bool:
        return self.type == ConfigType.PASSWORD

    @property
    def dynamic(self) -> bool:
        return self.update_mode != "read-only"


def _usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


B, S, I, SH, L, D, LI, P = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT,
                            ConfigType.LONG, ConfigType.DOUBLE, ConfigType.LIST, ConfigType.PASSWORD)
RO, PB, CW = "read-only", "per-broker", "cluster-wide"
HIGH, MED, LOW = "high", "medium", "low"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_BROKER_TABLE = [
    # name, type, default, validator, importance, update mode, documentation
    ("broker.id", I, -1, None, HIGH, RO, "The broker id for this server. If unset (-1), a unique id is generated when broker.id.generation.enable is true."),
    ("node.id", I, -1, None, HIGH, RO, "The node id of this server; must equal broker.id when both are set."),
    ("broker.rack", S, None, None, MED, RO, "Rack of the broker, used by rack-aware replica assignment."),
    ("listeners", S, "PLAINTEXT://:9092", None, HIGH, PB, "Comma-separated listener URIs (NAME://host:port) the broker binds; an empty host binds the default interface, 0.0.0.0 all interfaces."),
    ("advertised.listeners", S, None, None, HIGH, PB, "Listeners published to clients if different from listeners; 0.0.0.0 is not allowed. Defaults to listeners."),
    ("listener.security.protocol.map", S, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", None, LOW, PB, "Map between listener names and security protocols."),
    ("inter.broker.listener.name", S, None, None, MED, RO, "Listener used between brokers; defaults to the one matching security.inter.broker.protocol."),
    ("security.inter.broker.protocol", S, "PLAINTEXT", ValidString(SECURITY_PROTOCOLS), MED, RO, "Security protocol used to communicate between brokers."),
    ("log.dir", S, "/tmp/kafka-logs", None, HIGH, RO, "The directory in which the log data is kept (supplemental for log.dirs)."),
    ("log.dirs", S, None, None, HIGH, RO, "Comma-separated directories for log data. If not set, log.dir is used. Relative paths are resolved against the current directory."),
    ("num.partitions", I, 1, at_least(1), MED, RO, "The default number of log partitions per topic."),
    ("default.replication.factor", I, 1, None, MED, RO, "The default replication factor for automatically created topics."),
    ("auto.create.topics.enable", B, True, None, HIGH, RO, "Enable auto creation of topics on the server."),
    ("delete.topic.enable", B, True, None, HIGH, RO, "Enables delete topic; deleting a topic has no effect when off."),
    ("log.segment.bytes", I, 1024**3, at_least(14), HIGH, CW, "The maximum size of a single log file."),
    ("log.roll.ms", L, None, None, HIGH, CW, "Maximum time before a new log segment is rolled out (ms). If not set, log.roll.hours is used."),
    ("log.roll.hours", I, 168, at_least(1), HIGH, RO, "Maximum time before a new log segment is rolled out (hours), secondary to log.roll.ms."),
    ("log.roll.jitter.ms", L, None, None, HIGH, CW, "Maximum jitter subtracted from the roll time (ms). If not set, log.roll.jitter.hours is used."),
    ("log.roll.jitter.hours", I, 0, at_least(0), HIGH, RO, "Maximum jitter subtracted from the roll time (hours), secondary to log.roll.jitter.ms."),
    ("log.index.size.max.bytes", I, 10 * 1024 * 1024, at_least(4), MED, CW, "The maximum size in bytes of the offset index."),
    ("log.index.interval.bytes", I, 4096, at_least(0), MED, CW, "The interval with which an entry is added to the offset index."),
    ("log.retention.ms", L, None, None, HIGH, CW, "Time to keep a log file before deleting it (ms). If not set, log.retention.minutes is used; -1 means no limit."),
    ("log.retention.minutes", I, None, None, HIGH, RO, "Time to keep a log file (minutes), secondary to log.retention.ms. If not set, log.retention.hours is used."),
    ("log.retention.hours", I, 168, None, HIGH, RO, "Time to keep a log file (hours), tertiary to log.retention.ms."),
    ("log.retention.bytes", L, -1, None, HIGH, CW, "The maximum size of the log before deleting it; -1 means no limit."),
    ("log.retention.check.interval.ms", L, 300000, at_least(1), MED, RO, "How often the log cleaner checks whether any log is eligible for deletion."),
    ("log.flush.interval.messages", L, LONG_MAX, at_least(1), HIGH, CW, "Number of messages accumulated on a log partition before they are flushed to disk."),
    ("log.flush.interval.ms", L, None, None, HIGH, CW, "Maximum time a message stays in memory before flush (ms). If not set, log.flush.scheduler.interval.ms is used."),
    ("log.flush.scheduler.interval.ms", L, LONG_MAX, None, HIGH, RO, "How often the log flusher checks whether any log needs to be flushed (ms)."),
    ("log.flush.offset.checkpoint.interval.ms", I, 60000, at_least(0), HIGH, RO, "How often the recovery point checkpoint is written."),
    ("log.flush.start.offset.checkpoint.interval.ms", I, 60000, at_least(0), HIGH, RO, "How often the log start offset checkpoint is written."),
    ("log.cleanup.policy", LI, ["delete"], ValidList(CLEANUP_POLICIES), MED, CW, "The default cleanup policy for segments beyond the retention window: delete and/or compact."),
    ("log.cleaner.enable", B, True, None, MED, RO, "Enable the log cleaner process (needed for compacted topics, including __consumer_offsets)."),
    ("log.cleaner.threads", I, 1, at_least(0), MED, CW, "The number of background threads to use for log cleaning."),
    ("log.cleaner.io.max.bytes.per.second", D, DOUBLE_MAX, None, MED, CW, "The log cleaner's I/O throttle: read plus write bytes per second."),
    ("log.cleaner.dedupe.buffer.size", L, 128 * 1024 * 1024, None, MED, CW, "Total memory used for log deduplication across all cleaner threads."),
    ("log.cleaner.io.buffer.size", I, 512 * 1024, at_least(0), MED, CW, "Total memory used for log cleaner I/O buffers across all cleaner threads."),
    ("log.cleaner.io.buffer.load.factor", D, 0.9, None, MED, CW, "Log cleaner dedupe buffer load factor."),
    ("log.cleaner.backoff.ms", L, 15000, at_least(0), MED, CW, "The amount of time to sleep when there are no logs to clean."),
    ("log.cleaner.min.cleanable.ratio", D, 0.5, between(0, 1), MED, CW, "Minimum ratio of dirty log to total log for a log to be eligible for cleaning."),
    ("log.cleaner.delete.retention.ms", L, 86400000, at_least(0), MED, CW, "How long delete markers (tombstones) are retained for compacted topics."),
    ("log.cleaner.min.compaction.lag.ms", L, 0, at_least(0), MED, CW, "The minimum time a message remains uncompacted in the log."),
    ("log.cleaner.max.compaction.lag.ms", L, LONG_MAX, at_least(1), MED, CW, "The maximum time a message remains ineligible for compaction."),
    ("log.segment.delete.delay.ms", L, 60000, at_least(0), HIGH, CW, "The amount of time to wait before deleting a file from the filesystem."),
    ("log.message.timestamp.type", S, "CreateTime", ValidString(TIMESTAMP_TYPES), MED, CW, "Whether the timestamp in the message is the create time or the log append time."),
    ("log.message.timestamp.difference.max.ms", L, LONG_MAX, at_least(0), MED, CW, "[Deprecated] Maximum difference between the broker's timestamp and the message's timestamp."),
    ("log.message.timestamp.before.max.ms", L, LONG_MAX, at_least(0), MED, CW, "Maximum allowed time a message timestamp may be earlier than the broker's timestamp."),
    ("log.message.timestamp.after.max.ms", L, LONG_MAX, at_least(0), MED, CW, "Maximum allowed time a message timestamp may be later than the broker's timestamp."),
    ("produce.record.validation.enable", B, True, None, LOW, RO, "mpbroker: check every record of a produced magic-2 batch as Kafka's LogValidator does (structure, count, decompression, per-record timestamps). false: for trusted producers only; the header, CRC-32C and compacted-topic keys are still checked, a malformed record is stored as sent."),
    ("log.message.downconversion.enable", B, True, None, LOW, CW, "Whether down-conversion of message formats is enabled to satisfy consume requests."),
    ("log.preallocate", B, False, None, MED, CW, "Preallocate the file on disk when creating a new log segment."),
    ("message.max.bytes", I, 1024 * 1024 + 12, at_least(0), HIGH, CW, "The largest record batch size allowed (after compression if compression is enabled)."),
    ("socket.request.max.bytes", I, 100 * 1024 * 1024, at_least(1), HIGH, RO, "The maximum number of bytes in a socket request."),
    ("socket.send.buffer.bytes", I, 100 * 1024, None, HIGH, RO, "SO_SNDBUF of server sockets; -1 uses the OS default."),
    ("socket.receive.buffer.bytes", I, 100 * 1024, None, HIGH, RO, "SO_RCVBUF of server sockets; -1 uses the OS default."),
    ("compression.type", S, "producer", ValidString(COMPRESSION_TYPES), HIGH, CW, "The final compression type for a topic: a codec, 'uncompressed', or 'producer' to retain the producer's codec."),
    ("compression.gzip.level", I, -1, GzipLevel(), MED, CW, "The compression level to use if compression.type is gzip."),
    ("compression.lz4.level", I, 9, between(1, 17), MED, CW, "The compression level to use if compression.type is lz4."),
    ("compression.zstd.level", I, 3, between(-131072, 22), MED, CW, "The compression level to use if compression.type is zstd."),
    ("min.insync.replicas", I, 1, at_least(1), HIGH, CW, "Minimum number of in-sync replicas that must acknowledge a write with acks=all."),
    ("unclean.leader.election.enable", B, False, None, HIGH, CW, "Whether replicas not in the ISR may be elected leader as a last resort, at the risk of data loss."),
    ("offsets.topic.num.partitions", I, 50, at_least(1), HIGH, RO, "The number of partitions of the offset commit topic (do not change after deployment)."),
    ("offsets.topic.replication.factor", SH, 3, at_least(1), HIGH, RO, "The replication factor of the offsets topic."),
    ("offsets.topic.segment.bytes", I, 100 * 1024 * 1024, at_least(1), HIGH, RO, "The offsets topic segment bytes."),
    ("offsets.topic.compression.codec", I, 0, None, HIGH, RO, "Compression codec for the offsets topic."),
    ("offsets.load.buffer.size", I, 5 * 1024 * 1024, at_least(1), HIGH, RO, "Batch size for reading from the offsets segments when loading offsets."),
    ("offsets.retention.minutes", I, 7 * 24 * 60, at_least(1), HIGH, RO, "Committed offsets of a group are kept this long after the group becomes empty."),
    ("offsets.retention.check.interval.ms", L, 600000, at_least(1), HIGH, RO, "Frequency at which to check for stale offsets."),
    ("offsets.commit.timeout.ms", I, 5000, at_least(1), HIGH, RO, "Offset commit is delayed until all replicas of the offsets topic receive the commit or this timeout is reached."),
    ("offsets.commit.required.acks", SH, -1, None, HIGH, RO, "The required acks before the commit can be accepted."),
    ("offset.metadata.max.bytes", I, 4096, None, HIGH, RO, "The maximum size for a metadata entry associated with an offset commit."),
    ("group.initial.rebalance.delay.ms", I, 3000, None, MED, RO, "Time the group coordinator waits for more consumers to join a new group before the first rebalance."),
    ("group.min.session.timeout.ms", I, 6000, None, MED, RO, "The minimum allowed session timeout for registered consumers."),
    ("group.max.session.timeout.ms", I, 1800000, None, MED, RO, "The maximum allowed session timeout for registered consumers."),
    ("group.max.size", I, INT_MAX, at_least(1), MED, RO, "The maximum number of consumers that a single consumer group can accommodate."),
    ("transaction.state.log.num.partitions", I, 50, at_least(1), HIGH, RO, "The number of partitions for the transaction topic."),
    ("transaction.state.log.replication.factor", SH, 3, at_least(1), HIGH, RO, "The replication factor for the transaction topic."),
    ("transaction.state.log.segment.bytes", I, 100 * 1024 * 1024, at_least(1), HIGH, RO, "The transaction topic segment bytes."),
    ("transaction.state.log.min.isr", I, 2, at_least(1), HIGH, RO, "min.insync.replicas for the transaction topic."),
    ("transactional.id.expiration.ms", I, 604800000, at_least(1), HIGH, RO, "Time the transaction coordinator waits without status updates before expiring a transactional id."),
    ("transaction.max.timeout.ms", I, 900000, at_least(1), HIGH, RO, "The maximum allowed timeout for transactions."),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", I, 10000, at_least(1), LOW, RO, "The interval at which to roll back transactions that have timed out."),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", I, 3600000, at_least(1), LOW, RO, "The interval at which to remove transactions that have expired due to transactional.id.expiration.ms passing."),
    ("transaction.partition.verification.enable", B, True, None, LOW, CW, "KIP-890: a partition leader asks the transaction coordinator whether a transactional batch's partition was added to the transaction before appending it."),
    ("producer.id.expiration.ms", I, 86400000, at_least(1), LOW, CW, "Time a topic partition leader waits before expiring producer ids."),
    ("producer.id.expiration.check.interval.ms", I, 600000, at_least(1), LOW, RO, "The interval at which to remove producer ids that have expired."),
    ("zookeeper.connect", S, None, None, HIGH, RO, "ZooKeeper connection string host:port[,host:port...][/chroot]. Unset: the embedded metadata store is used."),
    ("zookeeper.session.timeout.ms", I, 18000, None, HIGH, RO, "Zookeeper session timeout."),
    ("zookeeper.connection.timeout.ms", I, None, None, HIGH, RO, "Max time to wait to establish a ZooKeeper connection; if not set, zookeeper.session.timeout.ms is used."),
    ("zookeeper.max.in.flight.requests", I, 10, at_least(1), HIGH, RO, "Maximum unacknowledged requests sent to ZooKeeper before blocking."),
    ("broker.id.generation.enable", B, True, None, MED, RO, "Enable automatic broker id generation; reserved.broker.max.id should be reviewed."),
    ("reserved.broker.max.id", I, 1000, at_least(0), MED, RO, "Max number that can be used for a broker.id; generated ids start above it."),
    ("controlled.shutdown.enable", B, True, None, MED, RO, "Enable controlled shutdown of the server."),
    ("controlled.shutdown.max.retries", I, 3, None, MED, RO, "Number of retries of a controlled shutdown before an unclean shutdown."),
    ("controlled.shutdown.retry.backoff.ms", L, 5000, None, MED, RO, "Backoff between controlled shutdown retries."),
    ("controller.socket.timeout.ms", I, 30000, None, MED, RO, "The socket timeout for controller-to-broker channels."),
    ("replica.lag.time.max.ms", L, 30000, None, HIGH, RO, "A follower that has not caught up to the leader's log end for this long is removed from the ISR."),
    ("num.replica.fetchers", I, 1, None, HIGH, CW, "Number of fetcher threads used to replicate records from each source broker."),
    ("replica.fetch.max.bytes", I, 1024 * 1024, at_least(0), MED, RO, "The number of bytes of messages to attempt to fetch for each partition."),
    ("replica.fetch.min.bytes", I, 1, None, HIGH, RO, "Minimum bytes expected for each fetch response."),
    ("replica.fetch.wait.max.ms", I, 500, None, MED, RO, "The maximum wait time for each fetcher request issued by follower replicas."),
    ("replica.fetch.backoff.ms", I, 1000, at_least(0), MED, RO, "The amount of time to sleep when a fetch partition error occurs."),
    ("replica.fetch.response.max.bytes", I, 10 * 1024 * 1024, at_least(0), MED, RO, "Maximum bytes expected for the entire fetch response."),
    ("replica.socket.timeout.ms", I, 30000, None, HIGH, RO, "The socket timeout for network requests of replica fetchers."),
    ("replica.socket.receive.buffer.bytes", I, 64 * 1024, None, HIGH, RO, "The socket receive buffer for network requests to the leader."),
    ("replica.high.watermark.checkpoint.interval.ms", L, 5000, None, HIGH, RO, "The frequency with which the high watermark is saved out to disk."),
    ("fetch.max.bytes", I, 55 * 1024 * 1024, at_least(1024), MED, RO, "The maximum number of bytes returned for a fetch request."),
    ("fetch.purgatory.purge.interval.requests", I, 1000, None, MED, RO, "The purge interval (in number of requests) of the fetch request purgatory."),
    ("producer.purgatory.purge.interval.requests", I, 1000, None, MED, RO, "The purge interval (in number of requests) of the producer request purgatory."),
    ("delete.records.purgatory.purge.interval.requests", I, 1, None, MED, RO, "The purge interval (in number of requests) of the delete records request purgatory."),
    ("queued.max.requests", I, 500, at_least(1), HIGH, RO, "The number of queued requests allowed before blocking the network threads."),
    ("connections.max.idle.ms", L, 600000, None, MED, RO, "Idle connections timeout: idle connections are closed after this long."),
    ("max.connections", I, INT_MAX, at_least(0), MED, CW, "The maximum number of connections allowed in the broker at any time."),
    ("max.connections.per.ip", I, INT_MAX, at_least(0), MED, CW, "The maximum number of connections allowed from each ip address."),
    ("max.connections.per.ip.overrides", S, "", None, MED, CW, "A comma-separated list of per-ip or hostname overrides to the default maximum number of connections, e.g. hostName:100,127.0.0.1:200."),
    ("queued.max.request.bytes", L, -1, None, MED, RO, "The number of queued bytes allowed before no more requests are read (per worker in mpbroker); -1: unbounded."),
    ("max.incremental.fetch.session.cache.slots", I, 1000, at_least(0), MED, RO, "The maximum number of incremental fetch sessions that we will maintain (per worker in mpbroker)."),
    ("max.incremental.fetch.session.cache.bytes", L, 128 * 1024 * 1024, at_least(0), MED, RO, "mpbroker: the most memory (estimated) the incremental fetch sessions of one worker may hold."),
    ("num.io.threads", I, 8, at_least(1), HIGH, CW, "The number of threads the server uses for processing requests."),
    ("num.network.threads", I, 3, at_least(1), HIGH, CW, "The number of threads the server uses for network requests."),
    ("num.recovery.threads.per.data.dir", I, 1, at_least(1), HIGH, CW, "The number of threads per data directory for log recovery at startup and flushing at shutdown."),
    ("background.threads", I, 10, at_least(1), HIGH, CW, "The number of threads to use for background processing tasks."),
    ("auto.leader.rebalance.enable", B, True, None, HIGH, RO, "Enables automatic leader balancing."),
    ("leader.imbalance.check.interval.seconds", L, 300, at_least(1), HIGH, RO, "The frequency with which the partition rebalance check is triggered by the controller."),
    ("leader.imbalance.per.broker.percentage", I, 10, None, HIGH, RO, "The ratio of leader imbalance allowed per broker, in percentage."),
    ("ssl.keystore.password", P, None, None, HIGH, PB, "The store password for the key store file."),
    ("ssl.key.password", P, None, None, HIGH, PB, "The password of the private key in the key store file."),
    ("ssl.truststore.password", P, None, None, HIGH, PB, "The password for the trust store file."),
    ("authorizer.class.name", S, "", None, LOW, RO, "The fully qualified name of a class that implements Kafka's Authorizer interface. mpbroker has no authorizer yet: a non-empty value is refused at start."),
    # request limits (issue #15): KIP-599 controller mutation quota, KIP-578 partition caps
    ("controller.mutation.rate", D, DOUBLE_MAX, at_least(0), MED, CW, "The default controller_mutation_rate client quota (KIP-599) of every user/client-id: partitions created or deleted per second through CreateTopics, CreatePartitions and DeleteTopics, as a token bucket of burst rate * controller.quota.window.num * controller.quota.window.size.seconds. The default is no quota."),
    ("controller.quota.window.num", I, 11, at_least(1), LOW, RO, "The number of samples to retain in memory for controller mutation quotas."),
    ("controller.quota.window.size.seconds", I, 1, at_least(1), LOW, RO, "The time span of each sample for controller mutations quotas."),
    ("max.broker.partitions", I, 4000, at_least(1), MED, CW, "The maximum number of partition replicas one broker may host (KIP-578); a CreateTopics or CreatePartitions that would pass it is refused with POLICY_VIOLATION."),
    ("max.partitions", I, INT_MAX, at_least(1), MED, CW, "The maximum number of partitions in the cluster (KIP-578); a CreateTopics or CreatePartitions that would pass it is refused with POLICY_VIOLATION."),
    # mpbroker's own
    ("num.workers", I, None, at_least(1), HIGH, RO, "mpbroker: number of worker processes (one per core). Default: the number of CPUs usable by this process."),
    ("worker.cpu.affinity", B, True, None, MED, RO, "mpbroker: pin each worker process to one CPU."),
    ("admin.socket", S, None, None, LOW, RO, "mpbroker: path of the local admin socket (served by the controller process; `mpbroker placement`). Default: <first log dir>/.mpbroker-admin.sock."),
    ("worker.heartbeat.timeout.ms", I, 30000, at_least(1), MED, RO, "mpbroker: a serving child whose heartbeat is older than this is killed (SIGKILL) and respawned."),
    ("placement.balance.threshold", D, 0.2, at_least(0), MED, RO, "mpbroker: placement balancing moves partitions only when the most loaded worker's load (bytes, requests and CPU, each as a share of the broker's total) exceeds the mean by more than this fraction; then the fewest moves found that bring every worker within it."),
    ("placement.balance.interval.ms", L, 0, at_least(0), MED, RO, "mpbroker: run placement balancing continuously every this many ms (on exponentially weighted load averages); 0: only `mpbroker placement balance`."),
    ("placement.balance.cooldown.ms", L, 300000, at_least(0), LOW, RO, "mpbroker: a partition moved by placement balancing is not moved again by it within this time (damping)."),
    ("worker.listener.eviction.ms", I, 3000, at_least(0), MED, RO, "mpbroker: a serving worker whose heartbeat is older than this is taken out of the SO_REUSEPORT listener group (new connections go to the other workers) until it beats again; 0 (or not below worker.heartbeat.timeout.ms) disables it."),
    ("worker.shutdown.timeout.ms", I, 30000, at_least(0), MED, RO, "mpbroker: how long a controlled shutdown waits for the workers before SIGKILL."),
    ("worker.start.timeout.ms", I, 300000, at_least(1), MED, RO, "mpbroker: a worker (first start or respawn) that does not serve within this time of its fork is killed (SIGKILL) and counts as a boot failure."),
    ("worker.boot.max.failures", I, 3, at_least(1), LOW, RO, "mpbroker: boot failures of one worker in a row before the supervisor gives up."),
    ("worker.restart.max", I, 10, at_least(0), LOW, RO, "mpbroker: worker deaths within worker.restart.window.ms above which the supervisor stops (crash loop)."),
    ("worker.restart.window.ms", I, 60000, at_least(1), LOW, RO, "mpbroker: the window of worker.restart.max."),
    ("log.level", S, "INFO", ValidString(("CRITICAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG"), case_insensitive=True), MED, RO, "mpbroker: the level of the broker's log (Python logging: CRITICAL, ERROR, WARN or WARNING, INFO, DEBUG; any case). A SIGHUP reload applies a new value at once."),
    ("metrics.listener", S, None, HttpListener(), MED, RO, "mpbroker: where the Prometheus endpoint /metrics is served (served by the controller process), e.g. http://127.0.0.1:9644. Unset: no metrics."),
    ("log.requests", B, False, None, LOW, RO, "mpbroker: log one line per request (API, version, client id, principal, partitions, sizes, latency) to the logger kafka.request.logger at DEBUG; that logger at DEBUG does the same."),
    # KIP-848 consumer groups (Kafka's GroupCoordinatorConfig)
    ("group.consumer.session.timeout.ms", I, 45000, at_least(1), MED, RO, "The timeout to detect client failures when using the consumer group protocol."),
    ("group.consumer.heartbeat.interval.ms", I, 5000, at_least(1), MED, RO, "The heartbeat interval given to the members of a consumer group."),
    ("group.consumer.assignors", LI, ["uniform", "range"], None, MED, RO, "The server-side assignors as a list of names (uniform, range) or Kafka class names; the first is the default."),
    ("group.consumer.max.size", I, INT_MAX, at_least(1), MED, RO, "The maximum number of consumers that a single consumer group supports."),
]

BROKER_CONFIGS: Dict[str, ConfigKey] = {
    r[0]: ConfigKey(r[0], r[1], r[2], r[3], r[4], r[6], r[5]) for r in _BROKER_TABLE}

# Topic configs: name, type, LogConfig default, validator, importance, doc,
# then the broker synonyms in Kafka's order (ServerTopicConfigSynonyms); the
# first is the one DescribeConfigs reports.
_TOPIC_TABLE = [
    ("cleanup.policy", LI, ["delete"], ValidList(CLEANUP_POLICIES), MED, "Retention policy for old segments: delete, compact, or both.", ["log.cleanup.policy"]),
    ("compression.type", S, "producer", ValidString(COMPRESSION_TYPES), MED, "Final compression type of the topic; 'producer' keeps the producer's codec.", ["compression.type"]),
    ("compression.gzip.level", I, -1, GzipLevel(), MED, "The compression level to use if compression.type is gzip.", ["compression.gzip.level"]),
    ("compression.lz4.level", I, 9, between(1, 17), MED, "The compression level to use if compression.type is lz4.", ["compression.lz4.level"]),
    ("compression.zstd.level", I, 3, between(-131072, 22), MED, "The compression level to use if compression.type is zstd.", ["compression.zstd.level"]),
    ("delete.retention.ms", L, 86400000, at_least(0), MED, "How long tombstones are retained for compacted topics.", ["log.cleaner.delete.retention.ms"]),
    ("file.delete.delay.ms", L, 60000, at_least(0), MED, "Time to wait before deleting a file from the filesystem.", ["log.segment.delete.delay.ms"]),
    ("flush.messages", L, LONG_MAX, at_least(1), MED, "Force an fsync after this many messages.", ["log.flush.interval.messages"]),
    ("flush.ms", L, LONG_MAX, at_least(0), MED, "Force an fsync after this much time.", ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]),
    ("index.interval.bytes", I, 4096, at_least(0), MED, "How frequently an index entry is added to the offset index.", ["log.index.interval.bytes"]),
    ("max.compaction.lag.ms", L, LONG_MAX, at_least(1), MED, "The maximum time a message remains ineligible for compaction.", ["log.cleaner.max.compaction.lag.ms"]),
    ("max.message.bytes", I, 1024 * 1024 + 12, at_least(0), MED, "The largest record batch size allowed by the topic.", ["message.max.bytes"]),
    ("message.downconversion.enable", B, True, None, LOW, "Whether down-conversion of message formats is enabled.", ["log.message.downconversion.enable"]),
    ("message.timestamp.type", S, "CreateTime", ValidString(TIMESTAMP_TYPES), MED, "CreateTime or LogAppendTime.", ["log.message.timestamp.type"]),
    ("message.timestamp.difference.max.ms", L, LONG_MAX, at_least(0), MED, "[Deprecated] Maximum difference between broker time and message timestamp.", ["log.message.timestamp.difference.max.ms"]),
    ("message.timestamp.before.max.ms", L, LONG_MAX, at_least(0), MED, "Maximum allowed time a timestamp may be earlier than the broker's time.", ["log.message.timestamp.before.max.ms"]),
    ("message.timestamp.after.max.ms", L, LONG_MAX, at_least(0), MED, "Maximum allowed time a timestamp may be later than the broker's time.", ["log.message.timestamp.after.max.ms"]),
    ("min.cleanable.dirty.ratio", D, 0.5, between(0, 1), MED, "How frequently the log compactor will attempt to clean the log.", ["log.cleaner.min.cleanable.ratio"]),
    ("min.compaction.lag.ms", L, 0, at_least(0), MED, "The minimum time a message remains uncompacted.", ["log.cleaner.min.compaction.lag.ms"]),
    ("min.insync.replicas", I, 1, at_least(1), MED, "Minimum in-sync replicas for acks=all writes.", ["min.insync.replicas"]),
    ("preallocate", B, False, None, MED, "Preallocate the file on disk when creating a new log segment.", ["log.preallocate"]),
    ("retention.bytes", L, -1, None, MED, "Maximum size a partition can grow to before old segments are discarded; -1 no limit.", ["log.retention.bytes"]),
    ("retention.ms", L, 7 * 24 * 3600 * 1000, at_least(-1), MED, "Maximum time a log is retained before old segments are discarded; -1 no limit.", ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]),
    ("segment.bytes", I, 1024**3, at_least(14), MED, "The segment file size for the log.", ["log.segment.bytes"]),
    ("segment.index.bytes", I, 10 * 1024 * 1024, at_least(4), MED, "The size of the index that maps offsets to file positions.", ["log.index.size.max.bytes"]),
    ("segment.jitter.ms", L, 0, at_least(0), MED, "Maximum random jitter subtracted from segment.ms.", ["log.roll.jitter.ms", "log.roll.jitter.hours"]),
    ("segment.ms", L, 7 * 24 * 3600 * 1000, at_least(1), MED, "Period after which a segment is rolled even if not full.", ["log.roll.ms", "log.roll.hours"]),
    ("unclean.leader.election.enable", B, False, None, MED, "Whether replicas not in the ISR may be elected leader as a last resort.", ["unclean.leader.election.enable"]),
]

TOPIC_CONFIGS: Dict[str, ConfigKey] = {
    r[0]: ConfigKey(r[0], r[1], r[2], r[3], r[4], r[5], CW) for r in _TOPIC_TABLE}
TOPIC_BROKER_SYNONYMS: Dict[str, List[str]] = {r[0]: list(r[6]) for r in _TOPIC_TABLE}

# Broker-side synonyms of a broker config (DynamicBrokerConfig.brokerConfigSynonyms).
_BROKER_SYNONYM_GROUPS = [
    ["log.roll.ms", "log.roll.hours"],
    ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
]


def broker_config_synonyms(name: str) -> List[str]:
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return list(group)
    return [name]


# -------------------------------------------------------------- parsing values

_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?))[fFdD]?\Z")


def parse_value(name: str, type_: int, value: Any) -> Any:
    """Kafka's ConfigDef.parseType: a string (or typed value) to the typed value."""
    if value is None:
        return None
    if isinstance(value, str):
        trimmed = value.strip()
        if type_ == ConfigType.BOOLEAN:
            if trimmed.lower() == "true":
                return True
            if trimmed.lower() == "false":
                return False
            raise ConfigError.invalid(name, value, "Expected value to be either true or false")
        if type_ in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            lo, hi = {ConfigType.INT: (INT_MIN, INT_MAX), ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
                      ConfigType.LONG: (LONG_MIN, LONG_MAX)}[type_]
            if not _INT_RE.match(trimmed) or not lo <= int(trimmed) <= hi:
                raise ConfigError.invalid(name, value, f"Not a number of type {ConfigType.NAMES[type_]}")
            return int(trimmed)
        if type_ == ConfigType.DOUBLE:
            if not _DOUBLE_RE.match(trimmed):
                raise ConfigError.invalid(name, value, "Not a number of type DOUBLE")
            return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))
        if type_ == ConfigType.LIST:
            return [] if not trimmed else [s for s in re.split(r"\s*,\s*", trimmed)]
        if type_ in (ConfigType.STRING, ConfigType.CLASS, ConfigType.PASSWORD):
            return trimmed
        raise ConfigError.invalid(name, value, "Unknown type")
    # already typed
    if type_ == ConfigType.BOOLEAN and isinstance(value, bool):
        return value
    if type_ in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG) and isinstance(value, int) \
            and not isinstance(value, bool):
        return parse_value(name, type_, str(value))
    if type_ == ConfigType.DOUBLE and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if type_ == ConfigType.LIST and isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    wanted = {ConfigType.BOOLEAN: "Boolean", ConfigType.INT: "Integer", ConfigType.SHORT: "Short",
              ConfigType.LONG: "Long", ConfigType.DOUBLE: "Double", ConfigType.LIST: "List",
              ConfigType.STRING: "String", ConfigType.CLASS: "Class", ConfigType.PASSWORD: "Password"}[type_]
    raise ConfigError.invalid(name, value, f"Expected value to be a {wanted}, but it was a {type(value).__name__}")


def _java_double(v: float) -> str:
    """Java's Double.toString (what Kafka prints for DOUBLE values)."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if str(v).startswith("-") else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        s = repr(float(v))
        return s if ("." in s or "e" in s) else s + ".0"
    t = Decimal(repr(float(v))).normalize().as_tuple()
    digits = "".join(map(str, t.digits))
    exp10 = len(digits) - 1 + t.exponent
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{'-' if t.sign else ''}{mantissa}E{exp10}"


def to_string(value: Any, type_: Optional[int] = None) -> Optional[str]:
    """Kafka's ConfigDef.convertToString."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if type_ == ConfigType.PASSWORD:
        return "[hidden]"
    return str(value)


def _validate(key: ConfigKey, raw: Any) -> Any:
    value = parse_value(key.name, key.type, raw)
    if key.validator is not None and (value is not None or isinstance(key.validator, Range)):
        key.validator(key.name, value)
    return value


# -------------------------------------------------------------- properties files

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[str]:
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        yield line


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.match(r"[0-9a-fA-F]{4}", s[i + 2:i + 6]):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        if c == "\\":
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> Dict[str, str]:
    """Java ``Properties.load`` syntax: ``#``/``!`` comments, ``key=value``,
    ``key: value``, ``key value``, backslash line continuation, escapes
    (``\\t \\n \\r \\f \\uXXXX``, ``\\=``, ``\\:``, ``\\ ``). Later keys win."""
    props: Dict[str, str] = {}
    for line in _logical_lines(text):
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key = line[:i]
        j = i
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
            while j < n and line[j] in " \t\f":
                j += 1
        props[_unescape(key)] = _unescape(line[j:])
    return props


def parse_overrides(overrides: Sequence[str]) -> Dict[str, str]:
    """``--override key=value`` arguments (Kafka's kafka.Kafka --override)."""
    props: Dict[str, str] = {}
    for item in overrides or ():
        if "=" not in item:
            raise ConfigError(f"Invalid command line properties: {item} (expected key=value)")
        key, value = item.split("=", 1)
        if not key.strip():
            raise ConfigError(f"Invalid command line properties: {item} (empty key)")
        props[key.strip()] = value
    return props


# -------------------------------------------------------------- listeners

class Endpoint(NamedTuple):
    listener_name: str
    host: str            # "" binds the default interface
    port: int
    security_protocol: str


_LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def parse_listeners(value: str, protocol_map: Mapping[str, str], name: str = "listeners") -> List[Endpoint]:
    endpoints = []
    for item in [s for s in re.split(r"\s*,\s*", (value or "").strip()) if s]:
        m = _LISTENER_RE.match(item)
        if not m:
            raise ConfigError(f"Unable to parse {item} to a broker endpoint")
        listener = m.group(1).upper()
        if listener not in protocol_map:
            raise ConfigError(f"No security protocol defined for listener {listener}")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError.invalid(name, value, f"port {port} out of range")
        endpoints.append(Endpoint(listener, m.group(2), port, protocol_map[listener]))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, {name}: {value}")
    return endpoints


def _parse_protocol_map(value: str) -> Dict[str, str]:
    out = {}
    for item in [s for s in re.split(r"\s*,\s*", value.strip()) if s]:
        if ":" not in item:
            raise ConfigError.invalid("listener.security.protocol.map", value, "Map entry should be of form <key>:<value>")
        k, v = item.split(":", 1)
        v = v.strip().upper()
        if v not in SECURITY_PROTOCOLS:
            raise ConfigError.invalid("listener.security.protocol.map", value, f"unknown security protocol {v}")
        out[k.strip().upper()] = v
    return out


# -------------------------------------------------------------- broker config

class BrokerConfig:
    """A broker's configuration: static props + dynamic layers, validated.

    ``config[name]`` / ``config.get(name)`` is the effective typed value of a
    defined key (None for a null default). Derived values are properties named
    as Kafka's KafkaConfig members (``log_retention_ms``, ``log_dirs``, ...).
    """

    def __init__(self, props: Mapping[str, Any], *, dynamic_broker: Optional[Mapping[str, Any]] = None,
                 dynamic_default: Optional[Mapping[str, Any]] = None, cpu_count: Optional[int] = None,
                 cwd: Optional[str] = None):
        self.static: Dict[str, str] = {k: to_string(v) if not isinstance(v, str) else v for k, v in props.items()}
        self.dynamic_broker: Dict[str, str] = {k: str(v) for k, v in (dynamic_broker or {}).items()}
        self.dynamic_default: Dict[str, str] = {k: str(v) for k, v in (dynamic_default or {}).items()}
        self._cpu_count = cpu_count if cpu_count is not None else _usable_cpus()
        self._cwd = cwd
        others = [k for k in self.static if k not in BROKER_CONFIGS and not k.startswith(PLACEMENT_PREFIX)]
        # Kafka keys mpbroker accepts and ignores, and the rest: typos (mpbroker/ignored_configs.py)
        self.ignored = sorted(k for k in others if is_ignored(k))
        self.unknown = sorted(k for k in others if not is_ignored(k))
        self._populate_id_synonyms()
        self.values: Dict[str, Any] = {}
        for name, key in BROKER_CONFIGS.items():
            raw, _ = self._raw(name)
            self.values[name] = _validate(key, raw) if raw is not None else self._default(key)
        self._check()

    # -- construction helpers -------------------------------------------

    @classmethod
    def from_text(cls, text: str, overrides: Sequence[str] = (), **kw) -> "BrokerConfig":
        props = parse_properties(text)
        props.update(parse_overrides(overrides))
        return cls(props, **kw)

    @classmethod
    def from_file(cls, path: str, overrides: Sequence[str] = (), **kw) -> "BrokerConfig":
        with open(path, "r", encoding="latin-1") as f:      # Properties.load reads ISO-8859-1
            return cls.from_text(f.read(), overrides, **kw)

    def with_dynamic(self, *, broker: Optional[Mapping[str, Any]] = None,
                     default: Optional[Mapping[str, Any]] = None) -> "BrokerConfig":
        """A new config with these dynamic layers (replacing the current ones
        where given). Values of None delete the key from that layer."""
        if broker is not None:
            validate_dynamic_update(broker, per_broker=True)
        if default is not None:
            validate_dynamic_update(default, per_broker=False)
        new_b = dict(self.dynamic_broker) if broker is None else {k: v for k, v in broker.items() if v is not None}
        new_d = dict(self.dynamic_default) if default is None else {k: v for k, v in default.items() if v is not None}
        return BrokerConfig(self.static, dynamic_broker=new_b, dynamic_default=new_d,
                            cpu_count=self._cpu_count, cwd=self._cwd)

    def _populate_id_synonyms(self) -> None:
        # KafkaConfig.populateSynonyms: broker.id and node.id mirror each other.
        b, n = self.static.get("broker.id"), self.static.get("node.id")
        if b is not None and n is not None:
            bv = parse_value("broker.id", I, b)
            nv = parse_value("node.id", I, n)
            if bv != nv:
                raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
        elif b is not None:
            self.static["node.id"] = b
        elif n is not None:
            self.static["broker.id"] = n

    def _raw(self, name: str):
        for layer, source in ((self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                              (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self.static, ConfigSource.STATIC_BROKER_CONFIG)):
            if name in layer:
                return layer[name], source
        return None, ConfigSource.DEFAULT_CONFIG

    def _default(self, key: ConfigKey) -> Any:
        if key.name == "num.workers":
            return self._cpu_count
        return list(key.default) if isinstance(key.default, list) else key.default

    def default_of(self, name: str) -> Any:
        return self._default(BROKER_CONFIGS[name])

    def source_of(self, name: str) -> int:
        return self._raw(name)[1]

    # -- access -------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.values:
            return self.values[name]
        raw, _ = self._raw(name)
        return default if raw is None else raw

    def __contains__(self, name: str) -> bool:
        return name in self.values

    # -- derived values (KafkaConfig) ------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def log_dirs(self) -> List[str]:
        """log.dirs, else log.dir; comma-separated; relative paths made absolute."""
        raw = self.values["log.dirs"]
        if raw is None:
            raw = self.values["log.dir"]
        dirs = [d for d in re.split(r"\s*,\s*", (raw or "").strip()) if d]
        base = self._cwd if self._cwd is not None else os.getcwd()
        return [os.path.normpath(os.path.join(base, d)) for d in dirs]

    @staticmethod
    def _ms(ms_value, other_value, factor):
        return ms_value if ms_value is not None else factor * other_value

    @property
    def log_roll_time_ms(self) -> int:
        return self._ms(self.values["log.roll.ms"], self.values["log.roll.hours"], 3600000)

    @property
    def log_roll_time_jitter_ms(self) -> int:
        return self._ms(self.values["log.roll.jitter.ms"], self.values["log.roll.jitter.hours"], 3600000)

    @property
    def log_retention_time_ms(self) -> int:
        """log.retention.ms, else minutes, else hours; any negative means -1."""
        ms = self.values["log.retention.ms"]
        if ms is None:
            minutes = self.values["log.retention.minutes"]
            ms = 60000 * minutes if minutes is not None else 3600000 * self.values["log.retention.hours"]
        return -1 if ms < 0 else ms

    @property
    def log_flush_interval_ms(self) -> int:
        v = self.values["log.flush.interval.ms"]
        return v if v is not None else self.values["log.flush.scheduler.interval.ms"]

    @property
    def offsets_retention_ms(self) -> int:
        return self.values["offsets.retention.minutes"] * 60000

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        v = self.values["zookeeper.connection.timeout.ms"]
        return v if v is not None else self.values["zookeeper.session.timeout.ms"]

    @property
    def listener_security_protocol_map(self) -> Dict[str, str]:
        return _parse_protocol_map(self.values["listener.security.protocol.map"])

    @property
    def listeners(self) -> List[Endpoint]:
        return parse_listeners(self.values["listeners"], self.listener_security_protocol_map)

    @property
    def advertised_listeners(self) -> List[Endpoint]:
        raw = self.values["advertised.listeners"]
        if raw is None:
            return self.listeners
        return parse_listeners(raw, self.listener_security_protocol_map, "advertised.listeners")

    @property
    def num_workers(self) -> int:
        return self.values["num.workers"]

    @property
    def admin_socket(self) -> str:
        v = self.values["admin.socket"]
        if v:
            base = self._cwd if self._cwd is not None else os.getcwd()
            return os.path.normpath(os.path.join(base, v))
        return os.path.join(self.log_dirs[0], ".mpbroker-admin.sock")

    @property
    def placement(self) -> Dict[str, str]:
        """``placement.*`` keys without the prefix (static, then dynamic layers)."""
        out = {}
        for layer in (self.static, self.dynamic_default, self.dynamic_broker):
            for k, v in layer.items():
                if k.startswith(PLACEMENT_PREFIX):
                    out[k[len(PLACEMENT_PREFIX):]] = v
        return out

    @property
    def uses_zookeeper(self) -> bool:
        return bool(self.values["zookeeper.connect"])

    def log_config_defaults(self) -> Dict[str, Any]:
        """Broker-level default of every topic config (KafkaConfig.extractLogConfigMap)."""
        out = {}
        for topic_name, synonyms in TOPIC_BROKER_SYNONYMS.items():
            primary = synonyms[0]
            if topic_name == "retention.ms":
                out[topic_name] = self.log_retention_time_ms
            elif topic_name == "segment.ms":
                out[topic_name] = self.log_roll_time_ms
            elif topic_name == "segment.jitter.ms":
                out[topic_name] = self.log_roll_time_jitter_ms
            elif topic_name == "flush.ms":
                out[topic_name] = self.log_flush_interval_ms
            else:
                v = self.values[primary]
                out[topic_name] = list(v) if isinstance(v, list) else v
        return out

    # -- validation (KafkaConfig.validateValues) ---------------------------

    def _check(self) -> None:
        v = self.values
        if v["broker.id.generation.enable"]:
            if not -1 <= v["broker.id"] <= v["reserved.broker.max.id"]:
                raise ConfigError("broker.id must be greater than or equal to -1 and not greater than reserved.broker.max.id")
        elif v["broker.id"] < 0:
            raise ConfigError("broker.id must be greater than or equal to 0")
        if self.log_roll_time_ms < 1:
            raise ConfigError("log.roll.ms must be greater than or equal to 1")
        if self.log_roll_time_jitter_ms < 0:
            raise ConfigError("log.roll.jitter.ms must be greater than or equal to 0")
        if not (self.log_retention_time_ms >= 1 or self.log_retention_time_ms == -1):
            raise ConfigError("log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
        if not self.log_dirs:
            raise ConfigError("At least one log directory must be defined via log.dirs or log.dir.")
        if v["log.cleaner.threads"] > 0 and v["log.cleaner.dedupe.buffer.size"] // v["log.cleaner.threads"] <= 1024 * 1024:
            raise ConfigError("log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        if v["replica.fetch.wait.max.ms"] > v["replica.socket.timeout.ms"]:
            raise ConfigError("replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms "
                              "to prevent unnecessary socket timeouts")
        if v["replica.fetch.wait.max.ms"] > v["replica.lag.time.max.ms"]:
            raise ConfigError("replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms "
                              "to prevent frequent changes in ISR")
        if not -1 <= v["offsets.commit.required.acks"] <= v["offsets.topic.replication.factor"]:
            raise ConfigError("offsets.commit.required.acks must be greater or equal -1 and less or equal to "
                              "offsets.topic.replication.factor")
        if 0 < v["queued.max.request.bytes"] < v["socket.request.max.bytes"]:
            raise ConfigError("queued.max.request.bytes must be larger or equal to socket.request.max.bytes")
        if v["group.max.session.timeout.ms"] < v["group.min.session.timeout.ms"]:
            raise ConfigError("group.max.session.timeout.ms must be greater than or equal to group.min.session.timeout.ms")
        listeners = self.listeners
        ports = [e.port for e in listeners if e.port != 0]
        if len(set(ports)) != len(ports):
            raise ConfigError(f"Each listener must have a different port, listeners: {v['listeners']}")
        if any(e.host == "0.0.0.0" for e in self.advertised_listeners):
            raise ConfigError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                              "Use a routable IP address.")
        adv = {e.listener_name for e in self.advertised_listeners}
        if not adv <= {e.listener_name for e in listeners}:
            raise ConfigError("advertised.listeners listener names must be equal to or a subset of the ones "
                              f"defined in listeners. Found {sorted(adv)}.")
        ib = v["inter.broker.listener.name"]
        if ib is not None and ib.upper() not in adv:
            raise ConfigError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                              f"The valid options based on currently configured listeners are {','.join(sorted(adv))}")
        self._check_security()

    def _check_security(self) -> None:
        """mpbroker serves PLAINTEXT only: a TLS or SASL listener, or an authorizer, would
        be served without the protection it asks for, so they are refused."""
        for name, endpoints in (("listeners", self.listeners), ("advertised.listeners", self.advertised_listeners)):
            for e in endpoints:
                if e.security_protocol != "PLAINTEXT":
                    raise ConfigError(f"{name}: listener {e.listener_name} uses security protocol "
                                      f"{e.security_protocol}, which mpbroker does not implement "
                                      "(only PLAINTEXT listeners are supported)", name)
        if self.values["security.inter.broker.protocol"] != "PLAINTEXT":
            raise ConfigError("security.inter.broker.protocol: mpbroker does not implement "
                              f"{self.values['security.inter.broker.protocol']} (only PLAINTEXT)",
                              "security.inter.broker.protocol")
        if self.values["authorizer.class.name"]:
            raise ConfigError(f"authorizer.class.name={self.values['authorizer.class.name']}: mpbroker has no "
                              "authorizer and would serve every client unchecked; remove the key",
                              "authorizer.class.name")


def unknown_config_warning(name: str) -> str:
    """Kafka's AbstractConfig.logUnused line for a key that no config defines."""
    return f"The configuration '{name}' was supplied but isn't a known config."


def describe_keys_text() -> str:
    """Every broker key with its doc, type, default, valid values, importance and update
    mode, in the order and shape of Kafka's generated broker config docs
    (`mpbroker serve --help-config`). num.workers' default depends on the machine."""
    out = []
    for key in BROKER_CONFIGS.values():
        if key.name == "num.workers":
            default = "the number of CPUs usable by this process"
        else:
            default = "null" if key.default is None else (to_string(key.default, key.type) or '""')
        out.append(key.name)
        out.append(f"    {key.doc}")
        out.append(f"    Type:         {ConfigType.NAMES[key.type].lower()}")
        out.append(f"    Default:      {default}")
        out.append(f"    Valid Values: {key.validator if key.validator is not None else ''}".rstrip())
        out.append(f"    Importance:   {key.importance}")
        out.append(f"    Update Mode:  {key.update_mode}")
        out.append("")
    out.append(f"{PLACEMENT_PREFIX}*")
    out.append("    mpbroker: free-form keys pinning partitions to workers (e.g. placement.topic.<topic>=0,1); "
               "kept as strings for the supervisor.")
    out.append("    Type:         string")
    out.append("    Importance:   low")
    out.append("    Update Mode:  read-only")
    return "\n".join(out) + "\n"


def validate_dynamic_update(props: Mapping[str, Any], per_broker: bool) -> None:
    """DynamicBrokerConfig.validateConfigs: names, modes and types."""
    names = set(props)
    non_dynamic = sorted(n for n in names if n in BROKER_CONFIGS and not BROKER_CONFIGS[n].dynamic)
    if non_dynamic:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(non_dynamic)})")
    if not per_broker:
        pb = sorted(n for n in names if n in BROKER_CONFIGS and BROKER_CONFIGS[n].update_mode == PB)
        if pb:
            raise ConfigError("Cannot update these configs at default cluster level, broker id must be "
                              f"specified: Set({', '.join(pb)})")
    for name, value in props.items():
        if name in BROKER_CONFIGS and value is not None:
            _validate(BROKER_CONFIGS[name], value)


# -------------------------------------------------------------- topic configs

def validate_topic_config(overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """Parse and validate a topic's overrides (LogConfig.validate); typed dict."""
    parsed = {}
    for name, raw in overrides.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise ConfigError(f"Unknown topic config name: {name}", name, raw)
        if raw is None:
            raise ConfigError.invalid(name, None, "Value must be non-null")
        parsed[name] = _validate(key, raw)
    lo = parsed.get("min.compaction.lag.ms")
    hi = parsed.get("max.compaction.lag.ms")
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                          f"max.compaction.lag.ms ({hi})")
    return parsed


def effective_topic_config(broker_config: BrokerConfig, overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """Every topic config's value: the override, else the broker default."""
    values = broker_config.log_config_defaults()
    values.update(validate_topic_config(overrides))
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})")
    return values


# -------------------------------------------------------------- describe

def _static_defaults() -> Dict[str, str]:
    return {k.name: to_string(k.default, k.type) for k in BROKER_CONFIGS.values() if k.default is not None}


def _config_synonyms(cfg: BrokerConfig, name: str, synonyms: List[str], sensitive: bool) -> List[dict]:
    """ConfigHelper.configSynonyms: by source, then by synonym order; then drop
    entries before the first one named ``name`` (as Kafka does)."""
    defaults = _static_defaults()
    if "num.workers" in synonyms:
        defaults["num.workers"] = str(cfg.default_of("num.workers"))
    out = []
    for layer, source in ((cfg.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (cfg.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (cfg.static, ConfigSource.STATIC_BROKER_CONFIG),
                          (defaults, ConfigSource.DEFAULT_CONFIG)):
        for syn in synonyms:
            if syn in layer:
                out.append({"name": syn, "value": None if sensitive else layer[syn], "source": source})
    while out and out[0]["name"] != name:
        out.pop(0)
    return out


def _entry(name, value, read_only, source, sensitive, synonyms, type_, doc, include_synonyms, include_documentation):
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "is_default": source == ConfigSource.DEFAULT_CONFIG,      # v0
        "config_source": source,                                  # v1+
        "is_sensitive": sensitive,
        "synonyms": synonyms if include_synonyms else [],          # v1+
        "config_type": type_,                                     # v3+
        "documentation": doc if include_documentation else None,  # v3+
    }


def describe_broker_configs(cfg: BrokerConfig, resource_name: str, keys: Optional[Iterable[str]] = None,
                            include_synonyms: bool = False, include_documentation: bool = False) -> List[dict]:
    """DescribeConfigs for a BROKER resource: ``resource_name`` is the broker id
    (every config) or "" (the cluster-wide dynamic defaults that are set).
    Entries carry the DescribeConfigsResult fields in snake_case."""
    per_broker = resource_name != ""
    if per_broker:
        names = list(BROKER_CONFIGS)
    else:
        names = [n for n in cfg.dynamic_default if n in BROKER_CONFIGS]
    if keys is not None:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    out = []
    for name in names:
        key = BROKER_CONFIGS[name]
        if per_broker:
            value = to_string(cfg.values[name], key.type)
        else:
            value = to_string(_validate(key, cfg.dynamic_default[name]), key.type)
        syns = _config_synonyms(cfg, name, broker_config_synonyms(name), key.sensitive)
        if not per_broker:
            syns = [s for s in syns if s["source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        source = syns[0]["source"] if syns else ConfigSource.DEFAULT_CONFIG
        out.append(_entry(name, value, not key.dynamic, source, key.sensitive, syns, key.type, key.doc,
                          include_synonyms, include_documentation))
    return out


def describe_topic_configs(cfg: BrokerConfig, overrides: Mapping[str, Any], keys: Optional[Iterable[str]] = None,
                           include_synonyms: bool = False, include_documentation: bool = False) -> List[dict]:
    """DescribeConfigs for a TOPIC resource (ConfigHelper.createTopicConfigEntry)."""
    values = effective_topic_config(cfg, overrides)
    names = sorted(TOPIC_CONFIGS)
    if keys is not None:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    out = []
    for name in names:
        key = TOPIC_CONFIGS[name]
        value = to_string(values[name], key.type)
        synonyms = TOPIC_BROKER_SYNONYMS[name]
        syns = _config_synonyms(cfg, synonyms[0], synonyms, key.sensitive)
        if name in overrides:
            syns.insert(0, {"name": name, "value": value, "source": ConfigSource.DYNAMIC_TOPIC_CONFIG})
        source = syns[0]["source"] if syns else ConfigSource.DEFAULT_CONFIG
        out.append(_entry(name, value, False, source, key.sensitive, syns, key.type, key.doc,
                          include_synonyms, include_documentation))
    return out
