"""`mpbroker offsets` (kafka-get-offsets.sh): offsets of partitions by time.

    mpbroker offsets [--topic T] [--partitions 0,1] [--time earliest|latest|max-timestamp|MS]

Prints `topic:partition:offset` per partition, as Kafka's tool (an empty offset when no
record is at or after the time). --time also takes Kafka's -1 (latest), -2 (earliest),
-3 (max-timestamp). Without --topic: every topic (internal ones with --include-internal).
"""
from __future__ import annotations

from mpbroker.cli import admin
from mpbroker.metadata.model import INTERNAL_TOPICS

# confluent_kafka is imported inside the commands: see mpbroker/cli/admin.py's docstring.

SPECIAL = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def _spec(value: str):
    from confluent_kafka.admin import OffsetSpec
    t = SPECIAL.get(value.lower()) if isinstance(value, str) else None
    if t is None:
        try:
            t = int(value)
        except ValueError:
            raise admin.CliError(f"bad --time {value!r}: earliest, latest, max-timestamp or "
                             "a timestamp in ms", 2)
    if t == -1:
        return OffsetSpec.latest()
    if t == -2:
        return OffsetSpec.earliest()
    if t == -3:
        return OffsetSpec.max_timestamp()
    if t < 0:
        raise admin.CliError(f"bad --time {value!r}", 2)
    return OffsetSpec.for_timestamp(t)


def cmd_offsets(args) -> int:
    from confluent_kafka import TopicPartition
    spec = _spec(args.time)
    wanted = admin.int_list(args.partitions, "--partitions") if args.partitions else None
    client = admin.admin_client(args)
    md = admin.metadata(args, client)
    if args.topic:
        t = md.topics.get(args.topic)
        if t is None or (t.error is not None and t.error.code() == 3):
            raise admin.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: topic '{args.topic}' does not exist")
        topics = [args.topic]
    else:
        topics = sorted(n for n in md.topics if args.include_internal or n not in INTERNAL_TOPICS)
    parts = []
    for n in topics:
        for p in sorted(md.topics[n].partitions):
            if wanted is None or p in wanted:
                parts.append(TopicPartition(n, p))
    if wanted is not None and args.topic:
        missing = set(wanted) - {tp.partition for tp in parts}
        if missing:
            raise admin.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: {args.topic} has no partition "
                             f"{', '.join(map(str, sorted(missing)))}")
    futs = client.list_offsets({tp: spec for tp in parts}, request_timeout=admin.timeout_s(args)) \
        if parts else {}
    rows = []
    for tp in parts:
        info = admin.result(futs[tp], args)
        rows.append({"topic": tp.topic, "partition": tp.partition,
                     "offset": info.offset if info.offset >= 0 else None,
                     "timestamp": info.timestamp if info.timestamp >= 0 else None})
    admin.emit(args, rows, (f"{r['topic']}:{r['partition']}:{'' if r['offset'] is None else r['offset']}"
                        for r in rows))
    return 0


def register(sub) -> None:
    p = sub.add_parser("offsets", help="offsets of partitions by time (kafka-get-offsets)")
    p.add_argument("--topic", help="the topic (default: every topic)")
    p.add_argument("--partitions", metavar="P,P", help="comma-separated partition ids")
    p.add_argument("--time", default="latest",
                   help="earliest, latest (default), max-timestamp, or a timestamp in ms")
    p.add_argument("--include-internal", action="store_true",
                   help="without --topic: internal topics too")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run(cmd_offsets, a))
