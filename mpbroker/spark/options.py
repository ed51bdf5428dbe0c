"""Options of the `mpbroker` Spark data source, parsed without any I/O.

The names and meanings follow Spark's own Kafka connector (the Structured Streaming +
Kafka Integration Guide), so a pipeline ports by changing `format("kafka")` to
`format("mpbroker")`:

* where to read: exactly one of `subscribe` (comma-separated topics),
  `subscribePattern` (a regular expression matched against whole topic names) or
  `assign` (JSON `{"topicA":[0,1],"topicB":[2,4]}`);
* from / to: `startingOffsets` / `endingOffsets` (`earliest`, `latest`, or JSON
  `{"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}` where -2 is earliest and -1 latest),
  `startingTimestamp` / `endingTimestamp` (ms since the epoch, for every partition),
  `startingOffsetsByTimestamp` / `endingOffsetsByTimestamp` (JSON of ms per
  partition), `startingOffsetsByTimestampStrategy` (`error` | `latest`);
* `maxOffsetsPerTrigger`, `minPartitions`, `maxRecordsPerPartition`,
  `failOnDataLoss`, `includeHeaders`, `isolation.level`
  (`read_uncommitted` | `read_committed`);
* Kafka client settings: `bootstrap.servers` (or Spark's `kafka.bootstrap.servers`);
  every `kafka.<name>` option is handed to the client as `<name>`; the consumers'
  group id is `kafka.group.id` or `<groupIdPrefix>-<random>` (they never commit);

Precedence is Spark's: a timestamp option wins over the matching offsets option
(`startingOffsetsByTimestamp` > `startingTimestamp` > `startingOffsets`).

Offsets are kept as `{topic: {partition: offset}}` with int partitions inside this
package; `to_json_offsets` / `from_json_offsets` convert to the string-keyed JSON that
Spark writes to the checkpoint.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Mapping

from mpbroker.security.client import librdkafka_properties

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
Offsets = dict[str, dict[int, int]]


class OptionError(ValueError):
    """A source or sink option is missing or malformed (the message says which)."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends: `kind` is 'earliest', 'latest', 'offsets',
    'timestamp' (one ts for all partitions) or 'timestamps' (per partition)."""
    kind: str
    offsets: Offsets = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class Subscription:
    """`kind` is 'subscribe' (topics), 'pattern' (regex) or 'assign' (topic_partitions)."""
    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    topic_partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "pattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.topic_partitions)

    def select(self, partitions_by_topic: Mapping[str, list[int]]) -> list[TopicPartition]:
        """The (topic, partition) pairs this subscription reads, given the cluster's
        topics; internal topics (leading `__`) only when named explicitly."""
        if self.kind == "assign":
            return sorted(self.topic_partitions)
        out = []
        for topic, parts in partitions_by_topic.items():
            if self.kind == "pattern" and topic.startswith("__"):
                continue
            if self.matches(topic):
                out += [(topic, p) for p in parts]
        return sorted(out)


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def get(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """Case-insensitive option lookup (Spark lower-cases option names)."""
    return lower_keys(options).get(name.lower(), default)


def get_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = get(options, name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {raw!r}")


def get_int(options: Mapping[str, str], name: str, default: int | None = None,
            minimum: int | None = None) -> int | None:
    raw = get(options, name)
    if raw is None:
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from None
    if minimum is not None and v < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, got {v}")
    return v


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """Settings for confluent-kafka: `kafka.X` options as `X`, plus `bootstrap.servers`
    and `isolation.level` given without the prefix."""
    opts = lower_keys(options)
    # security: librdkafka's keys pass through; the Java client's (kafka.sasl.jaas.config,
    # kafka.ssl.truststore.location of a PEM file, ...) are translated
    conf = librdkafka_properties({k[len("kafka."):]: v for k, v in opts.items()
                                  if k.startswith("kafka.")})
    for name in ("bootstrap.servers", "isolation.level"):
        if name in opts:
            conf[name] = opts[name]
    if not conf.get("bootstrap.servers"):
        raise OptionError("option 'bootstrap.servers' (or 'kafka.bootstrap.servers') is required")
    # Always set: librdkafka's own default is read_committed, Spark's (the Java client's)
    # is read_uncommitted.
    level = conf.setdefault("isolation.level", "read_uncommitted")
    if level not in ("read_uncommitted", "read_committed"):
        raise OptionError(f"option 'isolation.level' must be read_uncommitted or read_committed, got {level!r}")
    # Settings Spark's connector manages itself and rejects as well (it takes
    # `kafka.group.id`, which only names the reading consumers here: nothing is committed).
    for banned in ("auto.offset.reset", "enable.auto.commit", "key.deserializer",
                   "value.deserializer"):
        if banned in conf:
            raise OptionError(f"Kafka option 'kafka.{banned}' is not supported: the data source manages it")
    return conf


def subscription(options: Mapping[str, str]) -> Subscription:
    opts = lower_keys(options)
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise OptionError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
                          f"must be given (got {len(given)})")
    kind = given[0]
    raw = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {e}") from None
        return Subscription("pattern", pattern=raw)
    return Subscription("assign", topic_partitions=tuple(_parse_assign(raw)))


def _parse_assign(raw: str) -> list[TopicPartition]:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise OptionError(f"option 'assign' is not JSON like {{\"topicA\":[0,1]}}: {e}") from None
    if not isinstance(data, dict) or not data:
        raise OptionError("option 'assign' must be a JSON object like {\"topicA\":[0,1]}")
    out = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and p >= 0 for p in parts):
            raise OptionError(f"option 'assign': partitions of {topic!r} must be a list of ints")
        out += [(topic, p) for p in parts]
    return sorted(set(out))


def from_json_offsets(data, what: str = "offsets") -> Offsets:
    """{"t": {"0": 5}} (string or parsed) -> {"t": {0: 5}}."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise OptionError(f"{what} is not JSON like {{\"topicA\":{{\"0\":23}}}}: {e}") from None
    if not isinstance(data, dict):
        raise OptionError(f"{what} must be a JSON object like {{\"topicA\":{{\"0\":23}}}}")
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OptionError(f"{what}: the value for topic {topic!r} must be an object of partition -> number")
        try:
            out[topic] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            raise OptionError(f"{what}: bad partition or number for topic {topic!r}: {parts!r}") from None
    return out


def to_json_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    """The checkpoint form: sorted, string partition keys."""
    return {t: {str(p): int(o) for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())}


def offset_spec(options: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """`which` is 'starting' or 'ending'."""
    opts = lower_keys(options)
    by_ts = opts.get(f"{which}offsetsbytimestamp")
    if by_ts:
        return OffsetSpec("timestamps", offsets=from_json_offsets(by_ts, f"option '{which}OffsetsByTimestamp'"))
    ts = opts.get(f"{which}timestamp")
    if ts:
        try:
            return OffsetSpec("timestamp", timestamp=int(ts))
        except ValueError:
            raise OptionError(f"option '{which}Timestamp' must be ms since the epoch, got {ts!r}") from None
    raw = opts.get(f"{which}offsets", default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower())
    offsets = from_json_offsets(raw, f"option '{which}Offsets'")
    for topic, parts in offsets.items():
        for p, o in parts.items():
            if o < EARLIEST:
                raise OptionError(f"option '{which}Offsets': offset {o} for {topic}-{p} is not valid "
                                  "(use -2 for earliest, -1 for latest)")
            if which == "ending" and o == EARLIEST:
                raise OptionError(f"option 'endingOffsets': earliest (-2) is not allowed ({topic}-{p})")
    return OffsetSpec("offsets", offsets=offsets)


def flatten(offsets: Offsets) -> dict[TopicPartition, int]:
    return {(t, p): o for t, parts in offsets.items() for p, o in parts.items()}


def nest(flat: Mapping[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[p] = int(o)
    return out


def split_range(start: int, end: int, pieces: int) -> list[tuple[int, int]]:
    """[start, end) cut into `pieces` contiguous ranges of near-equal size."""
    pieces = max(1, min(pieces, end - start))
    size, extra = divmod(end - start, pieces)
    out, lo = [], start
    for i in range(pieces):
        hi = lo + size + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int) -> dict[TopicPartition, int]:
    """End offsets that take at most `max_rows` records in all, shared between
    partitions in proportion to their backlog (Spark's `maxOffsetsPerTrigger`)."""
    lag = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    for tp, backlog in lag.items():
        share = int(backlog * max_rows / total)
        out[tp] = start.get(tp, latest[tp]) + min(backlog, share)
    left = max_rows - sum(out[tp] - start.get(tp, latest[tp]) for tp in out)
    for tp in sorted(lag, key=lambda t: -lag[t]):  # hand out the rounding remainder
        if left <= 0:
            break
        room = latest[tp] - out[tp]
        take = min(room, left)
        out[tp] += take
        left -= take
    return out
