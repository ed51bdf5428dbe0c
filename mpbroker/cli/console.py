"""`mpbroker produce` / `mpbroker consume`: console tools (kafka-console-producer/
consumer.sh, kcat -P / -C, rpk topic produce/consume).

    mpbroker produce --topic T [--partition P] [--key-separator SEP] [--header K=V]...
        [--acks all|1|0] [--compression none|gzip|snappy|lz4|zstd]
        [--producer-property K=V]... [--file FILE]
    mpbroker consume --topic T [--partition P] [--offset earliest|latest|N]
        [--from-beginning] [--group G] [--max-messages N] [--timeout-ms MS]
        [--format FMT] [--isolation-level read_committed|read_uncommitted]
        [--consumer-property K=V]...

produce: one record per input line (stdin, or --file), without its newline; with
--key-separator the text before the first separator is the key (a line without it is
an error, as Kafka's LineMessageReader); --header adds the same header to every
record (kcat -H). Prints nothing (Kafka), or with --json one line per delivered record
(topic, partition, offset). Any failed delivery: exit 1 after the rest are flushed.

consume: without --group the partitions (all, or --partition) are assigned directly
and nothing is committed, starting at --offset (default latest, as Kafka;
--from-beginning = earliest; N = that offset in each partition). With --group the
consumer joins the group (subscribe), commits automatically, and --offset
earliest|latest is its auto.offset.reset for partitions without a commit. Ends after
--max-messages records, after --timeout-ms without a record, or on Ctrl-C; prints
"Processed a total of N messages" on stderr. Output per record: --format as kcat's -f
(%t topic, %p partition, %o offset, %k key, %s value, %K key length, %S value length,
%T timestamp ms, %h headers as k=v,k=v, %%, and \\n \\t \\\\ escapes; default "%s\\n"),
or with --json one JSON object per line (key/value as UTF-8 text, undecodable bytes
escaped).
"""
from __future__ import annotations

import json
import sys
import time

from mpbroker.cli import admin

# confluent_kafka is imported inside the commands: see mpbroker/cli/admin.py's docstring.

FATAL_CONSUME = {"UNKNOWN_TOPIC_OR_PART", "TOPIC_AUTHORIZATION_FAILED",
                 "GROUP_AUTHORIZATION_FAILED", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION",
                 "INVALID_GROUP_ID"}


# ------------------------------------------------------------------ produce

def _lines(args):
    f = open(args.file, "rb") if args.file else sys.stdin.buffer
    try:
        for line in f:
            yield line[:-1] if line.endswith(b"\n") else line
    finally:
        if args.file:
            f.close()


def cmd_produce(args) -> int:
    headers = [(k, v.encode()) for k, v in admin.key_values(args.header, "--header").items()]
    extra = {"acks": args.acks, "compression.type": args.compression, "linger.ms": 5}
    extra.update(admin.key_values(args.producer_property, "--producer-property"))
    if args.file:
        try:
            open(args.file, "rb").close()
        except OSError as e:
            raise admin.CliError(f"cannot read --file {args.file}: {e.strerror or e}", 2)
    p = admin.producer(args, extra)
    sep = args.key_separator.encode() if args.key_separator else None
    state = {"errors": [], "delivered": 0}

    def report(err, msg):
        if err is not None:
            state["errors"].append(f"{admin.kafka_name(err)}: {err.str()}")
            if args.json:
                print(json.dumps({"topic": msg.topic(), "partition": msg.partition(),
                                  "error": f"{admin.kafka_name(err)}: {err.str()}"}), flush=True)
            return
        state["delivered"] += 1
        if args.json:
            print(json.dumps({"topic": msg.topic(), "partition": msg.partition(),
                              "offset": msg.offset()}), flush=True)

    bad_line = None
    for n, line in enumerate(_lines(args), 1):
        key, value = None, line
        if sep is not None:
            key, found, value = line.partition(sep)
            if not found:
                bad_line = f"No key separator found on line number {n}: '{line.decode(errors='replace')}'"
                break
        kw = {"key": key, "value": value, "on_delivery": report}
        if headers:
            kw["headers"] = headers
        if args.partition is not None:
            kw["partition"] = args.partition
        while True:
            try:
                p.produce(args.topic, **kw)
                break
            except BufferError:          # the local queue is full: let deliveries drain
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(admin.timeout_s(args))
    if remaining:
        state["errors"].append(f"REQUEST_TIMED_OUT: {remaining} records not delivered in time")
    if bad_line:
        raise admin.CliError(bad_line)
    if state["errors"]:
        raise admin.CliError(f"{len(state['errors'])} records failed; first: {state['errors'][0]}")
    return 0


# ------------------------------------------------------------------ consume

def _unescape(fmt: str) -> str:
    return fmt.replace("\\\\", "\0").replace("\\n", "\n").replace("\\t", "\t") \
        .replace("\\r", "\r").replace("\0", "\\")


def render(fmt: str, msg) -> bytes:
    """kcat-style -f format of one message."""
    out = bytearray()
    i, n = 0, len(fmt)
    key, value = msg.key(), msg.value()
    while i < n:
        c = fmt[i]
        if c != "%" or i + 1 == n:
            out += c.encode()
            i += 1
            continue
        f = fmt[i + 1]
        i += 2
        if f == "t":
            out += msg.topic().encode()
        elif f == "p":
            out += str(msg.partition()).encode()
        elif f == "o":
            out += str(msg.offset()).encode()
        elif f == "k":
            out += key or b""
        elif f == "s":
            out += value or b""
        elif f == "K":
            out += str(-1 if key is None else len(key)).encode()
        elif f == "S":
            out += str(-1 if value is None else len(value)).encode()
        elif f == "T":
            out += str(msg.timestamp()[1]).encode()
        elif f == "h":
            out += b",".join(k.encode() + b"=" + (v or b"") for k, v in (msg.headers() or ()))
        elif f == "%":
            out += b"%"
        else:
            out += ("%" + f).encode()
    return bytes(out)


def _text(b: bytes | None):
    return None if b is None else b.decode("utf-8", errors="backslashreplace")


def as_json(msg) -> str:
    ts_type, ts = msg.timestamp()
    return json.dumps({"topic": msg.topic(), "partition": msg.partition(),
                       "offset": msg.offset(), "timestamp": ts,
                       "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type),
                       "key": _text(msg.key()), "value": _text(msg.value()),
                       "headers": [[k, _text(v)] for k, v in (msg.headers() or ())]})


def _start_offset(args):
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END
    off = "earliest" if args.from_beginning else (args.offset or "latest")
    if off in ("earliest", "beginning"):
        return "earliest", OFFSET_BEGINNING
    if off in ("latest", "end"):
        return "latest", OFFSET_END
    try:
        n = int(off)
    except ValueError:
        raise admin.CliError(f"bad --offset {off!r}: earliest, latest or an offset", 2)
    if n < 0:
        raise admin.CliError(f"bad --offset {off!r}: an offset is >= 0", 2)
    return None, n


def cmd_consume(args) -> int:
    from confluent_kafka import TopicPartition
    reset, start = _start_offset(args)
    if args.group and reset is None:
        raise admin.CliError("--offset N cannot be used with --group (the group's commits decide)", 2)
    if args.group and args.partition is not None:
        raise admin.CliError("--partition cannot be used with --group", 2)
    extra = {"group.id": args.group or f"mpbroker-console-{int(time.time() * 1000)}",
             "enable.auto.commit": bool(args.group), "auto.offset.reset": reset or "latest",
             "isolation.level": args.isolation_level}
    extra.update(admin.key_values(args.consumer_property, "--consumer-property"))
    fmt = _unescape(args.format)
    c = admin.consumer(args, extra)
    count = 0
    out = sys.stdout.buffer
    try:
        if args.group:
            c.subscribe([args.topic])
        else:
            from confluent_kafka import KafkaException
            try:
                md = c.list_topics(args.topic, timeout=admin.timeout_s(args))
            except KafkaException as e:
                raise admin.library_error(e)
            t = md.topics.get(args.topic)
            if t is None or (t.error is not None and t.error.code()) or not t.partitions:
                raise admin.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: topic '{args.topic}' does not exist")
            parts = sorted(t.partitions) if args.partition is None else [args.partition]
            if args.partition is not None and args.partition not in t.partitions:
                raise admin.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: {args.topic} has no partition "
                                 f"{args.partition}")
            c.assign([TopicPartition(args.topic, p, start) for p in parts])
        idle_since = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            if args.timeout_ms is not None and \
                    (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                break
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                err = msg.error()
                if err.name() in FATAL_CONSUME or err.fatal():
                    raise admin.CliError(f"{admin.kafka_name(err)}: {err.str()}")
                print(f"mpbroker: {admin.kafka_name(err)}: {err.str()}", file=sys.stderr)
                continue
            idle_since = time.monotonic()
            count += 1
            if args.json:
                out.write(as_json(msg).encode() + b"\n")
            else:
                out.write(render(fmt, msg))
            out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        try:
            c.close()          # commits (with --group) and leaves the group
        except Exception:
            pass
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("produce", help="produce records from stdin, one per line")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="the partition (default: the partitioner's)")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    p.add_argument("--header", action="append", default=[], metavar="K=V",
                   help="a header on every record (repeatable)")
    p.add_argument("--acks", default="all", choices=("all", "-1", "1", "0"))
    p.add_argument("--compression", default="none",
                   choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--producer-property", action="append", default=[], metavar="K=V",
                   help="a producer config (librdkafka key; repeatable)")
    p.add_argument("--file", help="read records from this file instead of stdin")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run(cmd_produce, a))

    p = sub.add_parser("consume", help="print records of a topic")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="only this partition (no --group)")
    p.add_argument("--offset", help="earliest, latest (default) or an offset")
    p.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    p.add_argument("--group", help="consume as a member of this group (commits)")
    p.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="stop when no record arrived for this long")
    p.add_argument("--format", default="%s\\n", metavar="FMT",
                   help="kcat-style format (%%t %%p %%o %%k %%s %%K %%S %%T %%h), default '%%s\\n'")
    p.add_argument("--isolation-level", default="read_uncommitted",
                   choices=("read_uncommitted", "read_committed"))
    p.add_argument("--consumer-property", action="append", default=[], metavar="K=V",
                   help="a consumer config (librdkafka key; repeatable)")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run(cmd_consume, a))
