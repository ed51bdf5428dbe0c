"""`mpbroker groups list|describe|reset-offsets|delete|delete-offsets`
(kafka-consumer-groups.sh, rpk group).

    mpbroker groups list [--state]
    mpbroker groups describe (--group G... | --all-groups) [--members | --state]
    mpbroker groups reset-offsets --group G (--topic T[:P,...]... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N
         | --to-datetime YYYY-MM-DDTHH:mm:SS[.sss][zone]) [--dry-run | --execute]
    mpbroker groups delete --group G...
    mpbroker groups delete-offsets --group G --topic T[:P,...]...

describe: per partition the committed offset, the log end offset (ListOffsets latest)
and the lag between them, with the member the partition is assigned to; partitions
assigned but without a commit show `-`.
reset-offsets works as Kafka's tool: it prints the planned offsets and changes nothing
unless --execute is given; only a group with no active members (Empty, or Dead: no
group yet) can be reset (else it fails with the group's state). Targets are clamped to
[log start, log end] (--to-offset, --shift-by), --to-datetime takes the first offset
at or after the time (the log end when there is none; a time without a zone is local
time). --all-topics: the topics the group has committed offsets for.
delete-offsets sends OffsetDelete to the group's coordinator (the project's own
client; confluent-kafka has no call for it).
"""
from __future__ import annotations

import sys
from datetime import datetime

from mpbroker.cli import admin
from mpbroker.protocol import api_keys as K

# confluent_kafka is imported inside the commands: see mpbroker/cli/admin.py's docstring.

NO_OFFSET = -1001      # librdkafka's OFFSET_INVALID: no committed offset


def _list(args, client) -> list:
    res = admin.result(client.list_consumer_groups(request_timeout=admin.timeout_s(args)), args)
    if res.errors:
        raise admin.CliError(f"listing groups failed on some broker: {res.errors[0]}")
    return sorted(res.valid, key=lambda g: g.group_id)


def _state(state) -> str:
    """Kafka's spelling of a group state (Stable, Empty, PreparingRebalance...)."""
    name = getattr(state, "name", str(state))
    special = {"PREPARING_REBALANCE": "PreparingRebalance",
               "COMPLETING_REBALANCE": "CompletingRebalance"}
    return special.get(name, name.capitalize())


def cmd_list(args) -> int:
    client = admin.admin_client(args)
    groups = _list(args, client)
    out = [{"group": g.group_id, "state": _state(g.state),
            "simple": bool(g.is_simple_consumer_group)} for g in groups]
    if args.json:
        admin.emit_json(out)
    elif args.state:
        admin.table(["GROUP", "STATE"], [[g["group"], g["state"]] for g in out])
    else:
        for g in out:
            print(g["group"])
    return 0


def _describe(args, client, group_ids: list[str]) -> dict:
    futs = client.describe_consumer_groups(group_ids, request_timeout=admin.timeout_s(args))
    return {g: admin.result(futs[g], args) for g in group_ids}


def _committed(args, client, group_id: str) -> dict:
    """{(topic, partition): offset} of the group's commits."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    futs = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                              request_timeout=admin.timeout_s(args))
    res = admin.result(futs[group_id], args)
    out = {}
    for tp in res.topic_partitions or ():
        if tp.error is not None and tp.error.code():
            raise admin.CliError(f"{admin.kafka_name(tp.error)}: {tp.error.str()} ({tp.topic}-{tp.partition})")
        if tp.offset != NO_OFFSET:
            out[(tp.topic, tp.partition)] = tp.offset
    return out


def _list_offsets(args, client, parts, spec_for) -> dict:
    """{(topic, partition): ListOffsetsResultInfo} for `parts`."""
    from confluent_kafka import TopicPartition
    if not parts:
        return {}
    req = {TopicPartition(t, p): spec_for(t, p) for t, p in parts}
    futs = client.list_offsets(req, request_timeout=admin.timeout_s(args))
    return {(tp.topic, tp.partition): admin.result(f, args) for tp, f in futs.items()}


def _latest(args, client, parts) -> dict:
    from confluent_kafka.admin import OffsetSpec
    return {k: v.offset for k, v in
            _list_offsets(args, client, parts, lambda t, p: OffsetSpec.latest()).items()}


def _earliest(args, client, parts) -> dict:
    from confluent_kafka.admin import OffsetSpec
    return {k: v.offset for k, v in
            _list_offsets(args, client, parts, lambda t, p: OffsetSpec.earliest()).items()}


def _group_ids(args, client) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in _list(args, client)]
    if not args.group:
        raise admin.CliError("give --group or --all-groups", 2)
    return list(args.group)


def cmd_describe(args) -> int:
    client = admin.admin_client(args)
    out = []
    for gid, desc in _describe(args, client, _group_ids(args, client)).items():
        members = [{"consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "host": m.host, "client_id": m.client_id,
                    "assignment": sorted([tp.topic, tp.partition] for tp in
                                         (m.assignment.topic_partitions if m.assignment else ()))}
                   for m in desc.members]
        owner = {(t, p): m for m in members for t, p in m["assignment"]}
        committed = _committed(args, client, gid)
        parts = sorted(set(committed) | set(owner))
        ends = _latest(args, client, parts)
        offsets = []
        for t, p in parts:
            cur, end = committed.get((t, p)), ends.get((t, p))
            m = owner.get((t, p))
            offsets.append({"topic": t, "partition": p, "current_offset": cur,
                            "log_end_offset": end,
                            "lag": None if cur is None or end is None or end < 0 else max(end - cur, 0),
                            "consumer_id": m["consumer_id"] if m else None,
                            "host": m["host"] if m else None,
                            "client_id": m["client_id"] if m else None})
        coord = desc.coordinator
        out.append({"group": gid, "state": _state(desc.state),
                    "protocol": desc.partition_assignor or None,
                    "coordinator": {"id": coord.id, "host": coord.host, "port": coord.port}
                    if coord else None,
                    "members": members, "offsets": offsets})
    if args.json:
        admin.emit_json(out)
        return 0
    for i, g in enumerate(out):
        if i:
            print()
        if args.state:
            c = g["coordinator"]
            admin.table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [[g["group"], f"{c['host']}:{c['port']} ({c['id']})" if c else None,
                      g["protocol"], g["state"], len(g["members"])]])
        elif args.members:
            admin.table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
                    [[g["group"], m["consumer_id"], m["host"], m["client_id"],
                      len(m["assignment"])] for m in g["members"]])
        else:
            if g["state"] == "Dead" and not g["offsets"]:
                print(f"Consumer group '{g['group']}' does not exist.")
                continue
            if not g["members"]:
                print(f"Consumer group '{g['group']}' has no active members.")
            admin.table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                     "CONSUMER-ID", "HOST", "CLIENT-ID"],
                    [[g["group"], o["topic"], o["partition"], o["current_offset"],
                      o["log_end_offset"], o["lag"], o["consumer_id"], o["host"],
                      o["client_id"]] for o in g["offsets"]])
    return 0


def _partitions(args, client, specs) -> list[tuple[str, int]]:
    """(topic, partition) pairs of --topic T[:P,...]: all of T's partitions when none
    are named; a missing topic or partition is an error, as Kafka's tool."""
    md = admin.metadata(args, client)
    out = []
    for topic, parts in specs:
        t = md.topics.get(topic)
        if t is None or (t.error is not None and t.error.code() == 3):
            raise admin.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: topic '{topic}' does not exist")
        known = sorted(t.partitions)
        for p in (known if parts is None else parts):
            if p not in t.partitions:
                raise admin.CliError(f"UNKNOWN_TOPIC_OR_PARTITION: partition {topic}-{p} does not exist")
            out.append((topic, p))
    return out


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime (yyyy-MM-dd'T'HH:mm:SS.sss, optional zone) -> epoch ms."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise admin.CliError(f"bad --to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss "
                         "with an optional zone (Z, +hh:mm)", 2)
    return int(dt.timestamp() * 1000)


def plan_resets(args, client, gid: str, parts: list, committed: dict) -> list[dict]:
    from confluent_kafka.admin import OffsetSpec
    earliest, latest = _earliest(args, client, parts), _latest(args, client, parts)

    def clamp(t, p, off):
        return min(max(off, earliest[(t, p)]), latest[(t, p)])

    if args.to_datetime is not None:
        ts = parse_datetime(args.to_datetime)
        found = _list_offsets(args, client, parts, lambda t, p: OffsetSpec.for_timestamp(ts))
    plan = []
    for t, p in parts:
        cur = committed.get((t, p))
        if args.to_earliest:
            new = earliest[(t, p)]
        elif args.to_latest:
            new = latest[(t, p)]
        elif args.to_offset is not None:
            new = clamp(t, p, args.to_offset)
        elif args.shift_by is not None:
            # no commit yet: shift from where a new consumer would start (Kafka: the
            # reset policy; librdkafka's default is latest)
            base = cur if cur is not None else latest[(t, p)]
            new = clamp(t, p, base + args.shift_by)
        elif args.to_current:
            new = cur if cur is not None else latest[(t, p)]
        else:
            off = found[(t, p)].offset
            new = off if off is not None and off >= 0 else latest[(t, p)]
        plan.append({"group": gid, "topic": t, "partition": p, "current_offset": cur,
                     "new_offset": new})
    return plan


def cmd_reset(args) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    chosen = sum(1 for x in (args.to_earliest, args.to_latest, args.to_current,
                             args.to_offset is not None, args.shift_by is not None,
                             args.to_datetime is not None) if x)
    if chosen != 1:
        raise admin.CliError("reset-offsets needs exactly one of --to-earliest, --to-latest, "
                         "--to-current, --to-offset, --shift-by, --to-datetime", 2)
    if bool(args.topic) == bool(args.all_topics):
        raise admin.CliError("reset-offsets needs --topic or --all-topics (one of them)", 2)
    if args.dry_run and args.execute:
        raise admin.CliError("--dry-run and --execute exclude each other", 2)
    if not args.group or len(args.group) != 1:
        raise admin.CliError("reset-offsets takes exactly one --group", 2)
    gid = args.group[0]
    client = admin.admin_client(args)
    desc = _describe(args, client, [gid])[gid]
    state = _state(desc.state)
    if state not in ("Empty", "Dead"):
        raise admin.CliError(f"Assignments can only be reset if the group '{gid}' is inactive, "
                         f"but the current state is {state}.")
    committed = _committed(args, client, gid)
    if args.all_topics:
        parts = sorted(committed)
    else:
        parts = _partitions(args, client, admin.topic_partitions(args.topic))
    plan = plan_resets(args, client, gid, parts, committed)
    if args.execute and plan:
        req = ConsumerGroupTopicPartitions(
            gid, [TopicPartition(r["topic"], r["partition"], r["new_offset"]) for r in plan])
        futs = client.alter_consumer_group_offsets([req], request_timeout=admin.timeout_s(args))
        res = admin.result(futs[gid], args)
        for tp in res.topic_partitions or ():
            if tp.error is not None and tp.error.code():
                raise admin.CliError(f"{admin.kafka_name(tp.error)}: {tp.error.str()} "
                                 f"({tp.topic}-{tp.partition})")
    if args.json:
        admin.emit_json({"group": gid, "executed": bool(args.execute), "offsets": plan})
        return 0
    admin.table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            [[r["group"], r["topic"], r["partition"], r["new_offset"]] for r in plan])
    if not args.execute:
        print("(dry run: nothing changed; add --execute to apply)")
    return 0


def cmd_delete(args) -> int:
    if not args.group:
        raise admin.CliError("groups delete needs --group", 2)
    client = admin.admin_client(args)
    futs = client.delete_consumer_groups(list(args.group), request_timeout=admin.timeout_s(args))
    results = {}
    for g in args.group:
        try:
            admin.result(futs[g], args)
            results[g] = None
        except admin.CliError as e:
            results[g] = str(e)
    failed = {g: e for g, e in results.items() if e}
    ok = [g for g, e in results.items() if not e]
    admin.emit(args, [{"group": g, "error": e} for g, e in results.items()],
           ["Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok)
            + ") was successful."] if ok else [])
    for g, e in failed.items():
        print(f"mpbroker: deletion of consumer group '{g}' failed: {e}", file=sys.stderr)
    return 1 if failed else 0


def cmd_delete_offsets(args) -> int:
    if not args.group or len(args.group) != 1:
        raise admin.CliError("delete-offsets takes exactly one --group", 2)
    if not args.topic:
        raise admin.CliError("delete-offsets needs --topic", 2)
    gid = args.group[0]
    client = admin.admin_client(args)
    parts = _partitions(args, client, admin.topic_partitions(args.topic))
    coord = _describe(args, client, [gid])[gid].coordinator
    if coord is None:
        raise admin.CliError(f"COORDINATOR_NOT_AVAILABLE: no coordinator for group '{gid}'")
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    body = {"group_id": gid, "topics": [
        {"name": t, "partitions": [{"partition_index": p} for p in ps]}
        for t, ps in by_topic.items()]}
    resp, = admin.wire_calls(args, "delete-offsets",
                         [(coord.host, coord.port, K.OFFSET_DELETE, lambda v: body)])
    top = resp.get("error_code", 0)
    if top:
        raise admin.CliError(f"{admin.error_name(top)}: deleting offsets of group '{gid}' failed")
    rows = [{"topic": t["name"], "partition": p["partition_index"],
             "error": admin.error_name(p["error_code"]) if p["error_code"] else None}
            for t in resp.get("topics") or () for p in t.get("partitions") or ()]
    if args.json:
        admin.emit_json({"group": gid, "partitions": rows})
    else:
        admin.table(["TOPIC", "PARTITION", "STATUS"],
                [[r["topic"], r["partition"], f"Error: {r['error']}" if r["error"]
                  else "Successful"] for r in rows])
    return 1 if any(r["error"] for r in rows) else 0


def register(sub) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of, delete consumer groups")
    p.add_argument("action", choices=("list", "describe", "reset-offsets", "delete",
                                      "delete-offsets"))
    p.add_argument("--group", action="append", help="a group id (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="describe: every group")
    p.add_argument("--members", action="store_true", help="describe: the members")
    p.add_argument("--state", action="store_true", help="list/describe: the group state")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,...]",
                   help="reset-offsets/delete-offsets: a topic, optionally its partitions")
    p.add_argument("--all-topics", action="store_true",
                   help="reset-offsets: every topic the group has offsets for")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-current", action="store_true")
    p.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--dry-run", action="store_true", help="reset-offsets: only print (default)")
    p.add_argument("--execute", action="store_true", help="reset-offsets: apply the reset")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run({
        "list": cmd_list, "describe": cmd_describe, "reset-offsets": cmd_reset,
        "delete": cmd_delete, "delete-offsets": cmd_delete_offsets}[a.action], a))
