"""The Kafka side of the data source, on confluent-kafka (librdkafka).

Everything here talks to the broker only through the Kafka protocol as a stock client
does: Metadata, ListOffsets (watermarks and offsets for timestamps), Fetch, Produce,
CreateTopics. Nothing imports the broker's own modules, so the data source works
against any Kafka-compatible broker.

`read_range` is the one reader both batch and streaming use: it assigns one partition
at an explicit offset (no group membership, no commits; confluent-kafka still wants a
`group.id`) and yields chunks of messages until the end offset. It reports records
deleted by retention (`DataLossError`) unless told to skip them.
"""
from __future__ import annotations

import logging
import socket
import struct
import time
import uuid
from typing import Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewTopic

from mpbroker.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, Subscription, TopicPartition

log = logging.getLogger("mpbroker.spark")

METADATA_TIMEOUT_S = 30.0
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs
CONSUME_CHUNK = 10_000
MESSAGE_TIMEOUT_MS = 120_000  # a producer's message.timeout.ms unless the options set one

DATA_LOSS_HINT = ("Some data may have been lost because they are not available in the broker any more; "
                  "either the data was aged out by retention or deleted (DeleteRecords), or the topic may "
                  "have been deleted before all the data in the topic was processed. If you don't want your "
                  "query to fail on such cases, set the source option \"failOnDataLoss\" to \"false\".")


class DataLossError(RuntimeError):
    """Records a query needs are gone from the broker (and failOnDataLoss is true)."""


def data_loss(detail: str, fail: bool) -> None:
    """Raise (failOnDataLoss=true) or log a warning and go on."""
    if fail:
        raise DataLossError(f"{detail}. {DATA_LOSS_HINT}")
    log.warning("%s. Some data may have been lost; going on because failOnDataLoss=false.", detail)


# ---------------------------------------------------------------- clients

def consumer(conf: Mapping[str, str], group_id_prefix: str = "mpbroker-spark", **extra):
    """A consumer that only reads assigned partitions and commits nothing. Its group id
    (never used for a subscription or a commit) is `kafka.group.id` when given, else
    `<groupIdPrefix>-<random>`, as in Spark's connector."""

    base = {
        "group.id": f"{group_id_prefix}-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",  # an offset that is gone is reported, never skipped silently
        "enable.partition.eof": True,
        "socket.timeout.ms": 30000,
        "max.partition.fetch.bytes": 4 * 1024 * 1024,  # bigger fetches: a range is read start to end
    }
    base.update(conf)
    base.update(extra)
    return Consumer(base)


def producer(conf: Mapping[str, str], **extra):

    base = {
        "enable.idempotence": True,  # acks=all, retries without duplicates or reordering
        "acks": "all",
        "linger.ms": 5,
        "partitioner": "murmur2_random",  # the Java client's partitioner for keyed records
        "message.timeout.ms": MESSAGE_TIMEOUT_MS,
    }
    # Consumer-only settings a reader's options may carry.
    base.update({k: v for k, v in conf.items() if k not in ("isolation.level", "group.id")})
    base.update(extra)
    return Producer(base)


def admin(conf: Mapping[str, str]):

    return AdminClient({k: v for k, v in conf.items() if k not in ("isolation.level",)})


# ---------------------------------------------------------------- metadata and offsets

def topic_partitions(client, topics: list[str] | None = None,
                     timeout: float = METADATA_TIMEOUT_S) -> dict[str, list[int]]:
    """{topic: [partition ids]} for the named topics (those that exist) or all topics.

    Always a Metadata request for all topics: asking for one topic by name lets a
    broker with auto.create.topics.enable create it with the default partition count."""
    md = client.list_topics(timeout=timeout)
    out = {}
    for name, t in md.topics.items():
        if t.error is not None or not t.partitions:
            continue
        if topics is None or name in topics:
            out[name] = sorted(t.partitions)
    return out


def resolve_subscription(client, sub: Subscription, timeout: float = METADATA_TIMEOUT_S) -> list[TopicPartition]:
    names = list(sub.topics) if sub.kind == "subscribe" else None
    if sub.kind == "assign":
        names = sorted({t for t, _ in sub.topic_partitions})
    existing = topic_partitions(client, names, timeout)
    if sub.kind == "assign":
        missing = [f"{t}-{p}" for t, p in sub.topic_partitions if p not in existing.get(t, [])]
        if missing:
            raise OptionError(f"option 'assign' names partitions that do not exist: {', '.join(missing)}")
    return sub.select(existing)


def watermarks(client, tps: list[TopicPartition],
               timeout: float = METADATA_TIMEOUT_S) -> dict[TopicPartition, tuple[int, int]]:
    """{tp: (log start offset, high watermark or last stable offset)} asked of the broker."""

    return {(t, p): client.get_watermark_offsets(KTP(t, p), timeout=timeout, cached=False) for t, p in tps}


def offsets_for_times(client, times: Mapping[TopicPartition, int],
                      timeout: float = METADATA_TIMEOUT_S) -> dict[TopicPartition, int]:
    """{tp: first offset with timestamp >= ts, or -1 when there is none}."""

    if not times:
        return {}
    asked = [KTP(t, p, int(ts)) for (t, p), ts in times.items()]
    answer = client.offsets_for_times(asked, timeout=timeout)
    out = {}
    for ktp in answer:
        if ktp.error is not None:
            raise RuntimeError(f"ListOffsets by timestamp failed for {ktp.topic}-{ktp.partition}: {ktp.error}")
        out[(ktp.topic, ktp.partition)] = ktp.offset if ktp.offset >= 0 else -1
    return out


def resolve_offsets(client, spec: OffsetSpec, tps: list[TopicPartition],
                    marks: Mapping[TopicPartition, tuple[int, int]], *, which: str,
                    ts_strategy: str = "error") -> dict[TopicPartition, int]:
    """Concrete offsets for `tps` from a starting/ending spec.

    JSON offsets must name every partition read (Spark's rule), -2/-1 meaning the
    earliest/latest. A timestamp with no record at or after it resolves to the latest
    offset for an ending bound; for a starting bound it is an error unless
    `startingOffsetsByTimestampStrategy` is `latest`."""
    if spec.kind == "earliest":
        return {tp: marks[tp][0] for tp in tps}
    if spec.kind == "latest":
        return {tp: marks[tp][1] for tp in tps}
    if spec.kind == "offsets":
        out = {}
        for t, p in tps:
            o = spec.offsets.get(t, {}).get(p)
            if o is None:
                raise OptionError(f"option '{which}Offsets' does not name partition {t}-{p}; "
                                  "give every partition read (-2 earliest, -1 latest)")
            out[(t, p)] = marks[(t, p)][0] if o == EARLIEST else marks[(t, p)][1] if o == LATEST else o
        return out
    if spec.kind == "timestamp":
        times = {tp: spec.timestamp for tp in tps}
    else:
        times = {}
        for t, p in tps:
            ts = spec.offsets.get(t, {}).get(p)
            if ts is None:
                raise OptionError(f"option '{which}OffsetsByTimestamp' does not name partition {t}-{p}")
            times[(t, p)] = ts
    found = offsets_for_times(client, times)
    out = {}
    for tp in tps:
        o = found.get(tp, -1)
        if o < 0:
            if which == "starting" and ts_strategy != "latest":
                raise OptionError(f"no record in {tp[0]}-{tp[1]} has a timestamp >= {times[tp]}; set "
                                  "'startingOffsetsByTimestampStrategy' to 'latest' to start at the end instead")
            o = marks[tp][1]
        out[tp] = o
    return out


# ---------------------------------------------------------------- reading one range

def read_range(conf: Mapping[str, str], topic: str, partition: int, start: int, end: int, *,
               fail_on_data_loss: bool = True, poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
               chunk: int = CONSUME_CHUNK, group_id_prefix: str = "mpbroker-spark") -> Iterator[list]:
    """Yield lists of confluent_kafka Messages with start <= offset < end, in order.

    Offsets need not be contiguous (compaction, transaction markers, aborted records
    under read_committed). Records before `start` that retention already removed are a
    data loss; so is running into the end of the log before `end`."""

    if start >= end:
        return
    c = consumer(conf, group_id_prefix)
    try:
        low, high = c.get_watermark_offsets(KTP(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False)
        if start < low:
            data_loss(f"Cannot fetch offset {start} of {topic}-{partition}: the earliest offset the broker has "
                      f"is {low}", fail_on_data_loss)
            start = low
            if start >= end:
                return
        c.assign([KTP(topic, partition, start)])
        pos = start
        deadline = time.monotonic() + poll_timeout_ms / 1000
        while pos < end:
            # Never ask for more than the range holds: consume() waits its whole timeout
            # for a batch it cannot fill.
            msgs = c.consume(max(1, min(chunk, end - pos)), timeout=1.0)
            out = []
            for m in msgs:
                err = m.error()
                if err is None:
                    off = m.offset()
                    if off >= end:
                        pos = end
                        break
                    if off >= pos:
                        out.append(m)
                        pos = off + 1
                    continue
                code = err.code()
                if code == KafkaError._PARTITION_EOF:
                    pos = max(pos, _position(c, topic, partition, pos))
                    if pos < end:
                        # At the end of the log but short of the planned end: read_committed
                        # skips past markers on the next fetch; anything else is lost data.
                        low, high = c.get_watermark_offsets(KTP(topic, partition), timeout=METADATA_TIMEOUT_S,
                                                            cached=False)
                        if high < end and m.offset() >= high:
                            data_loss(f"{topic}-{partition} ends at offset {high}, before the planned end {end}",
                                      fail_on_data_loss)
                            pos = end
                elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    low, _ = c.get_watermark_offsets(KTP(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False)
                    data_loss(f"Cannot fetch offset {pos} of {topic}-{partition}: the earliest offset the broker "
                              f"has is {low} ({err.str()})", fail_on_data_loss)
                    pos = max(pos, low)
                    if pos < end:
                        c.assign([KTP(topic, partition, pos)])
                elif not err.retriable() and code != KafkaError._TRANSPORT:
                    raise RuntimeError(f"reading {topic}-{partition} at offset {pos}: {err.str()}")
            if out:
                deadline = time.monotonic() + poll_timeout_ms / 1000
                yield out
            elif pos < end and time.monotonic() > deadline:
                raise TimeoutError(f"no record of {topic}-{partition} arrived for {poll_timeout_ms} ms at offset "
                                   f"{pos} (reading up to {end}); is the broker up? (kafkaConsumer.pollTimeoutMs)")
    finally:
        c.close()


def _position(c, topic: str, partition: int, default: int) -> int:

    try:
        (tp,) = c.position([KTP(topic, partition)])
        return tp.offset if tp.offset >= 0 else default
    except Exception:  # noqa: BLE001 - the position is only a hint here
        return default


# ---------------------------------------------------------------- broker capabilities

API_VERSIONS_KEY = 18
TRANSACTION_API_KEYS = {22: "InitProducerId", 24: "AddPartitionsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit"}


def api_keys(bootstrap: str, timeout: float = 10.0) -> set[int]:
    """The API keys a broker advertises (ApiVersions v0, the one request every Kafka
    broker answers in the same format). librdkafka keeps this to itself."""
    host, port = bootstrap.split(",")[0].strip().rsplit(":", 1)
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        client_id = b"mpbroker-spark"
        header = struct.pack(">hhih", API_VERSIONS_KEY, 0, 1, len(client_id)) + client_id
        s.sendall(struct.pack(">i", len(header)) + header)
        (size,) = struct.unpack(">i", _recv(s, 4))
        frame = _recv(s, size)
    return parse_api_versions_v0(frame)


def parse_api_versions_v0(frame: bytes) -> set[int]:
    """The API keys in an ApiVersions v0 response (after the size prefix)."""
    _corr, err, n = struct.unpack_from(">ihi", frame, 0)
    if err:
        raise RuntimeError(f"ApiVersions answered error {err}")
    return {struct.unpack_from(">h", frame, 10 + 6 * i)[0] for i in range(n)}


def has_transaction_apis(keys: set[int]) -> bool:
    return set(TRANSACTION_API_KEYS) <= set(keys)


def supports_transactions(bootstrap: str) -> bool:
    return has_transaction_apis(api_keys(bootstrap))


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = s.recv(n - len(buf))
        if not part:
            raise ConnectionError("broker closed the connection")
        buf += part
    return buf


def ensure_topic(conf: Mapping[str, str], name: str, partitions: int = 1, config: dict | None = None,
                 timeout: float = METADATA_TIMEOUT_S) -> None:
    """Create a topic unless it exists (a race with another creator is fine)."""

    a = admin(conf)
    if name in topic_partitions(a, [name], timeout):
        return
    fut = a.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                          operation_timeout=timeout, request_timeout=timeout)[name]
    try:
        fut.result(timeout)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout
    while name not in topic_partitions(a, [name], timeout):
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r} not visible in metadata after {timeout}s")
        time.sleep(0.1)
