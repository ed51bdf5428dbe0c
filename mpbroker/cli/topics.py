"""`mpbroker topics list|create|describe|alter|delete` (kafka-topics.sh, rpk topic).

    mpbroker topics list [--exclude-internal]
    mpbroker topics create TOPIC [--partitions N] [--replication-factor R] [--config k=v]... [--if-not-exists]
    mpbroker topics describe [TOPIC...] [--exclude-internal]
    mpbroker topics alter TOPIC [--partitions N] [--config k=v]... [--delete-config k]...
    mpbroker topics delete TOPIC... [--if-exists]

TOPIC may also be given as `--topic` (Kafka's spelling). Partitions and replication
factor default to the broker's `num.partitions` / `default.replication.factor`.
`alter` adds partitions (CreatePartitions; a count can only grow) and sets or removes
topic configs (IncrementalAlterConfigs). `describe` prints Kafka's layout: a topic
line with its non-default configs, then one line per partition.
"""
from __future__ import annotations

from mpbroker.cli import admin
from mpbroker.metadata.model import INTERNAL_TOPICS

# confluent_kafka is imported inside the commands: see mpbroker/cli/admin.py's docstring.


def _names(args) -> list[str]:
    return list(args.topics) + list(args.topic or [])


def _one(args) -> str:
    names = _names(args)
    if len(names) != 1:
        raise admin.CliError(f"topics {args.action} takes exactly one topic", 2)
    return names[0]


def cmd_list(args) -> int:
    client = admin.admin_client(args)
    md = admin.metadata(args, client)
    names = sorted(t for t in md.topics if not (args.exclude_internal and t in INTERNAL_TOPICS))
    admin.emit(args, names, names)
    return 0


def cmd_create(args) -> int:
    from confluent_kafka.admin import NewTopic
    name = _one(args)
    configs = admin.key_values(args.config, "--config")
    client = admin.admin_client(args)
    nt = NewTopic(name, num_partitions=args.partitions if args.partitions else -1,
                  replication_factor=args.replication_factor or -1, config=configs)
    fut = client.create_topics([nt], request_timeout=admin.timeout_s(args))[name]
    try:
        admin.result(fut, args)
        created = True
    except admin.CliError as e:
        if not (args.if_not_exists and str(e).startswith("TOPIC_ALREADY_EXISTS")):
            raise
        created = False
    admin.emit(args, {"topic": name, "created": created}, [f"Created topic {name}."] if created else [])
    return 0


def _dynamic_configs(args, client, names: list[str]) -> dict[str, dict[str, str]]:
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType
    if not names:
        return {}
    futs = client.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                   request_timeout=admin.timeout_s(args))
    out = {}
    for res, fut in futs.items():
        entries = admin.result(fut, args)
        out[res.name] = {k: e.value for k, e in sorted(entries.items())
                         if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return out


def cmd_describe(args) -> int:
    from confluent_kafka import TopicCollection
    client = admin.admin_client(args)
    names = _names(args)
    if not names:
        md = admin.metadata(args, client)
        names = sorted(t for t in md.topics
                       if not (args.exclude_internal and t in INTERNAL_TOPICS))
    descs = {}
    if names:
        futs = client.describe_topics(TopicCollection(names), request_timeout=admin.timeout_s(args))
        descs = {n: admin.result(futs[n], args) for n in names}
    configs = _dynamic_configs(args, client, names)
    out = []
    for n in names:
        d = descs[n]
        parts = [{"partition": p.id, "leader": p.leader.id if p.leader is not None else -1,
                  "replicas": [r.id for r in p.replicas], "isr": [r.id for r in p.isr]}
                 for p in sorted(d.partitions, key=lambda p: p.id)]
        rf = len(parts[0]["replicas"]) if parts else 0
        out.append({"topic": n, "topic_id": str(d.topic_id) if d.topic_id else None,
                    "internal": bool(d.is_internal), "partition_count": len(parts),
                    "replication_factor": rf, "configs": configs.get(n, {}),
                    "partitions": parts})
    if args.json:
        admin.emit_json(out)
        return 0
    for t in out:
        cfg = ",".join(f"{k}={v}" for k, v in t["configs"].items())
        print(f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\t"
              f"PartitionCount: {t['partition_count']}\t"
              f"ReplicationFactor: {t['replication_factor']}\tConfigs: {cfg}")
        for p in t["partitions"]:
            print(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                  f"Replicas: {','.join(map(str, p['replicas']))}\t"
                  f"Isr: {','.join(map(str, p['isr']))}")
    return 0


def cmd_alter(args) -> int:
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                       NewPartitions, ResourceType)
    name = _one(args)
    sets = admin.key_values(args.config, "--config")
    if not args.partitions and not sets and not args.delete_config:
        raise admin.CliError("topics alter needs --partitions, --config or --delete-config", 2)
    client = admin.admin_client(args)
    done = {"topic": name}
    if args.partitions:
        fut = client.create_partitions([NewPartitions(name, args.partitions)],
                                       request_timeout=admin.timeout_s(args))[name]
        admin.result(fut, args)
        done["partitions"] = args.partitions
    if sets or args.delete_config:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in sets.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in args.delete_config]
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        fut = client.incremental_alter_configs([res], request_timeout=admin.timeout_s(args))[res]
        admin.result(fut, args)
        done["set_configs"] = sets
        done["deleted_configs"] = list(args.delete_config)
    said = []
    if "partitions" in done:
        said.append(f"Topic {name} now has {args.partitions} partitions.")
    if sets or args.delete_config:
        said.append(f"Completed updating config for topic {name}.")
    admin.emit(args, done, said)
    return 0


def cmd_delete(args) -> int:
    names = _names(args)
    if not names:
        raise admin.CliError("topics delete needs at least one topic", 2)
    client = admin.admin_client(args)
    futs = client.delete_topics(names, request_timeout=admin.timeout_s(args))
    deleted, missing = [], []
    for n in names:
        try:
            admin.result(futs[n], args)
            deleted.append(n)
        except admin.CliError as e:
            if args.if_exists and str(e).startswith("UNKNOWN_TOPIC_OR_PARTITION"):
                missing.append(n)
                continue
            raise
    admin.emit(args, {"deleted": deleted, "missing": missing}, (f"Deleted topic {n}." for n in deleted))
    return 0


def register(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter, delete topics")
    p.add_argument("action", choices=("list", "create", "describe", "alter", "delete"))
    p.add_argument("topics", nargs="*", metavar="TOPIC")
    p.add_argument("--topic", action="append", help="a topic (repeatable)")
    p.add_argument("--partitions", type=int, help="create: partition count; alter: the new count")
    p.add_argument("--replication-factor", type=int, help="create: replicas per partition")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="create/alter: a topic config (repeatable)")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="alter: remove a topic config override (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="create: no error if it exists")
    p.add_argument("--if-exists", action="store_true", help="delete: no error if it is missing")
    p.add_argument("--exclude-internal", action="store_true",
                   help="list/describe: leave out internal topics")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run({"list": cmd_list, "create": cmd_create,
                                         "describe": cmd_describe, "alter": cmd_alter,
                                         "delete": cmd_delete}[a.action], a))
