"""`mpbroker log-dirs` (kafka-log-dirs.sh --describe): DescribeLogDirs on every broker.

    mpbroker log-dirs [--broker-list 1,2] [--topic-list a,b]
    mpbroker log-dirs move --topic T --partition P --dir DIR [--broker ID] [--wait]

Per broker, per log dir: the dir's error, its volume's total and usable bytes (v4), and
per partition the size of its log data and its offset lag. Text: one table row per
partition (dirs without partitions get a row of their own). --json prints Kafka's tool
layout: {"version": 1, "brokers": [{"broker", "logDirs": [{"logDir", "error",
"totalBytes", "usableBytes", "partitions": [{"partition": "t-0", "size", "offsetLag",
"isFuture"}]}]}]}. Sent with the project's own protocol client (confluent-kafka has no
DescribeLogDirs); brokers come from Metadata.

`move` is AlterReplicaLogDirs (what kafka-reassign-partitions.sh sends for the
`log_dirs` of a reassignment JSON): the replica of T-P on each broker that hosts one
(or only on --broker) moves to DIR, an absolute path among that broker's `log.dirs`.
A refused partition (LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION,
REPLICA_NOT_AVAILABLE) is one error line and exit code 1. The move runs in the
background on the broker; --wait polls DescribeLogDirs until the replica is served
from DIR (within --request-timeout-ms). --json prints {"version": 1, "moves":
[{"broker", "partition": "T-P", "logDir", "error", "done"}]}.
"""
from __future__ import annotations

import argparse
import os
import time

from mpbroker.cli import admin
from mpbroker.protocol import api_keys as K


def _request(topics: list[str] | None, md) -> dict:
    if topics is None:
        return {"topics": None}
    return {"topics": [{"topic": t, "partitions": sorted(md.topics[t].partitions)}
                       for t in topics if t in md.topics]}


def cmd_log_dirs(args) -> int:
    client = admin.admin_client(args)
    md = admin.metadata(args, client)
    brokers = sorted(md.brokers.values(), key=lambda b: b.id)
    if args.broker_list:
        wanted = set(admin.int_list(args.broker_list, "--broker-list"))
        missing = wanted - {b.id for b in brokers}
        if missing:
            raise admin.CliError(f"brokers not in the cluster: {', '.join(map(str, sorted(missing)))}")
        brokers = [b for b in brokers if b.id in wanted]
    topics = None
    if args.topic_list:
        topics = [t for t in args.topic_list.split(",") if t]
        unknown = [t for t in topics if t not in md.topics]
        if unknown:
            raise admin.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: {', '.join(unknown)}")
    body = _request(topics, md)
    responses = admin.wire_calls(args, "log-dirs",
                             [(b.host, b.port, K.DESCRIBE_LOG_DIRS, lambda v: body)
                              for b in brokers])
    out = {"version": 1, "brokers": []}
    for b, resp in zip(brokers, responses):
        if resp.get("error_code"):
            raise admin.CliError(f"{admin.error_name(resp['error_code'])}: broker {b.id} refused "
                             "DescribeLogDirs")
        dirs = []
        for r in resp.get("results") or ():
            dirs.append({
                "logDir": r["log_dir"],
                "error": admin.error_name(r["error_code"]) if r["error_code"] else None,
                "totalBytes": r.get("total_bytes", -1), "usableBytes": r.get("usable_bytes", -1),
                "partitions": [{"partition": f"{t['name']}-{p['partition_index']}",
                                "size": p["partition_size"], "offsetLag": p["offset_lag"],
                                "isFuture": p["is_future_key"]}
                               for t in r["topics"] for p in t["partitions"]]})
        out["brokers"].append({"broker": b.id, "logDirs": dirs})
    if args.json:
        admin.emit_json(out)
        return 0
    rows = []
    for b in out["brokers"]:
        for d in b["logDirs"]:
            head = [b["broker"], d["logDir"], d["error"] or "NONE",
                    d["totalBytes"] if d["totalBytes"] >= 0 else None,
                    d["usableBytes"] if d["usableBytes"] >= 0 else None]
            if not d["partitions"]:
                rows.append(head + [None, None, None, None])
            for p in d["partitions"]:
                rows.append(head + [p["partition"], p["size"], p["offsetLag"],
                                    str(p["isFuture"]).lower()])
    admin.table(["BROKER", "DIR", "ERROR", "TOTAL-BYTES", "USABLE-BYTES", "PARTITION", "SIZE",
             "OFFSET-LAG", "IS-FUTURE"], rows)
    return 0


def _replica_dirs(args, brokers, topic: str, partition: int) -> dict[int, tuple[str, bool]]:
    """broker id -> (dir, is_future) of T-P's entries, the served one winning."""
    body = {"topics": [{"topic": topic, "partitions": [partition]}]}
    out: dict[int, tuple[str, bool]] = {}
    responses = admin.wire_calls(args, "log-dirs", [(b.host, b.port, K.DESCRIBE_LOG_DIRS,
                                                 lambda v: body) for b in brokers])
    for b, resp in zip(brokers, responses):
        for r in resp.get("results") or ():
            for t in r.get("topics") or ():
                for p in t["partitions"]:
                    if t["name"] == topic and p["partition_index"] == partition:
                        if b.id not in out or not p["is_future_key"]:
                            out[b.id] = (r["log_dir"], p["is_future_key"])
    return out


def cmd_move(args) -> int:
    if not os.path.isabs(args.dir):
        raise admin.CliError(f"--dir must be an absolute path: {args.dir}", 2)
    client = admin.admin_client(args)
    md = admin.metadata(args, client)
    brokers = {b.id: b for b in md.brokers.values()}
    if args.broker is not None:
        if args.broker not in brokers:
            raise admin.CliError(f"broker {args.broker} is not in the cluster")
        targets = [brokers[args.broker]]
    else:
        t = md.topics.get(args.topic)
        part = t.partitions.get(args.partition) if t is not None else None
        replicas = [r for r in (part.replicas if part is not None else ()) if r in brokers]
        targets = [brokers[r] for r in replicas] or sorted(brokers.values(), key=lambda b: b.id)
    body = {"dirs": [{"path": args.dir, "topics": [{"name": args.topic,
                                                     "partitions": [args.partition]}]}]}
    responses = admin.wire_calls(args, "log-dirs move",
                             [(b.host, b.port, K.ALTER_REPLICA_LOG_DIRS, lambda v: body)
                              for b in targets])
    name = f"{args.topic}-{args.partition}"
    moves = []
    for b, resp in zip(targets, responses):
        codes = [p["error_code"] for t in resp.get("results") or () for p in t["partitions"]]
        code = codes[0] if codes else 0
        moves.append({"broker": b.id, "partition": name, "logDir": args.dir,
                      "error": admin.error_name(code) if code else None, "done": False})
    failed = [m for m in moves if m["error"]]
    if failed:
        m = failed[0]
        raise admin.CliError(f"{m['error']}: broker {m['broker']} refused to move {name} to "
                         f"{m['logDir']}")
    deadline = time.monotonic() + admin.timeout_s(args)
    while True:
        where = _replica_dirs(args, targets, args.topic, args.partition)
        for m in moves:
            m["done"] = where.get(m["broker"]) == (args.dir, False)
        if not args.wait or all(m["done"] for m in moves):
            break
        if time.monotonic() > deadline:
            raise admin.CliError(f"REQUEST_TIMED_OUT: {name} is not in {args.dir} after "
                             f"{args.request_timeout_ms} ms")
        time.sleep(0.2)
    admin.emit(args, {"version": 1, "moves": moves},
           (f"broker {m['broker']}: moving {name} to {m['logDir']}: "
            f"{'done' if m['done'] else 'started'}" for m in moves))
    return 0


def register(sub) -> None:
    p = sub.add_parser("log-dirs", help="log directories and partition sizes (DescribeLogDirs)")
    actions = p.add_subparsers(dest="log_dirs_action", metavar="{move}")
    m = actions.add_parser("move", help="move a replica to another log dir of its broker "
                                        "(AlterReplicaLogDirs)")
    m.add_argument("--topic", required=True)
    m.add_argument("--partition", type=int, required=True)
    m.add_argument("--dir", required=True, metavar="DIR",
                   help="the target log dir (absolute path, one of the broker's log.dirs)")
    m.add_argument("--broker", type=int, metavar="ID",
                   help="only this broker's replica (default: every broker hosting one)")
    m.add_argument("--wait", action="store_true",
                   help="wait until the replica is served from DIR")
    admin.add_common(m)
    for action in m._actions:       # the parent's values of these are kept unless given here
        if action.dest in ("bootstrap_server", "command_config", "json", "request_timeout_ms"):
            action.default = argparse.SUPPRESS
    m.set_defaults(func=lambda a: admin.run(cmd_move, a))
    p.add_argument("--describe", action="store_true",
                   help="accepted for kafka-log-dirs.sh compatibility (the only action)")
    p.add_argument("--broker-list", metavar="ID,ID", help="brokers to ask (default: all)")
    p.add_argument("--topic-list", metavar="T,T", help="topics to show (default: all)")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run(cmd_log_dirs, a))
