"""`mpbroker log-dirs` (kafka-log-dirs.sh --describe): DescribeLogDirs on every broker.

    mpbroker log-dirs [--broker-list 1,2] [--topic-list a,b]

Per broker, per log dir: the dir's error, its volume's total and usable bytes (v4), and
per partition the size of its log data and its offset lag. Text: one table row per
partition (dirs without partitions get a row of their own). --json prints Kafka's tool
layout: {"version": 1, "brokers": [{"broker", "logDirs": [{"logDir", "error",
"totalBytes", "usableBytes", "partitions": [{"partition": "t-0", "size", "offsetLag",
"isFuture"}]}]}]}. Sent with the project's own protocol client (confluent-kafka has no
DescribeLogDirs); brokers come from Metadata.
"""
from __future__ import annotations

from mpbroker.cli import admin as A
from mpbroker.protocol import api_keys as K


def _request(topics: list[str] | None, md) -> dict:
    if topics is None:
        return {"topics": None}
    return {"topics": [{"topic": t, "partitions": sorted(md.topics[t].partitions)}
                       for t in topics if t in md.topics]}


def cmd_log_dirs(args) -> int:
    client = A.admin_client(args)
    md = A.metadata(args, client)
    brokers = sorted(md.brokers.values(), key=lambda b: b.id)
    if args.broker_list:
        wanted = set(A.int_list(args.broker_list, "--broker-list"))
        missing = wanted - {b.id for b in brokers}
        if missing:
            raise A.CliError(f"brokers not in the cluster: {', '.join(map(str, sorted(missing)))}")
        brokers = [b for b in brokers if b.id in wanted]
    topics = None
    if args.topic_list:
        topics = [t for t in args.topic_list.split(",") if t]
        unknown = [t for t in topics if t not in md.topics]
        if unknown:
            raise A.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: {', '.join(unknown)}")
    body = _request(topics, md)
    responses = A.wire_calls(args, "log-dirs",
                             [(b.host, b.port, K.DESCRIBE_LOG_DIRS, lambda v: body)
                              for b in brokers])
    out = {"version": 1, "brokers": []}
    for b, resp in zip(brokers, responses):
        if resp.get("error_code"):
            raise A.CliError(f"{A.error_name(resp['error_code'])}: broker {b.id} refused "
                             "DescribeLogDirs")
        dirs = []
        for r in resp.get("results") or ():
            dirs.append({
                "logDir": r["log_dir"],
                "error": A.error_name(r["error_code"]) if r["error_code"] else None,
                "totalBytes": r.get("total_bytes", -1), "usableBytes": r.get("usable_bytes", -1),
                "partitions": [{"partition": f"{t['name']}-{p['partition_index']}",
                                "size": p["partition_size"], "offsetLag": p["offset_lag"],
                                "isFuture": p["is_future_key"]}
                               for t in r["topics"] for p in t["partitions"]]})
        out["brokers"].append({"broker": b.id, "logDirs": dirs})
    if args.json:
        A.emit_json(out)
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
    A.table(["BROKER", "DIR", "ERROR", "TOTAL-BYTES", "USABLE-BYTES", "PARTITION", "SIZE",
             "OFFSET-LAG", "IS-FUTURE"], rows)
    return 0


def register(sub) -> None:
    p = sub.add_parser("log-dirs", help="log directories and partition sizes (DescribeLogDirs)")
    p.add_argument("--describe", action="store_true",
                   help="accepted for kafka-log-dirs.sh compatibility (the only action)")
    p.add_argument("--broker-list", metavar="ID,ID", help="brokers to ask (default: all)")
    p.add_argument("--topic-list", metavar="T,T", help="topics to show (default: all)")
    A.add_common(p)
    p.set_defaults(func=lambda a: A.run(cmd_log_dirs, a))
