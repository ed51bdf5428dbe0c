"""`mpbroker configs describe|alter` (kafka-configs.sh, rpk topic/cluster config).

    mpbroker configs describe --entity-type topics|brokers (--entity-name N | --entity-default) [--all]
    mpbroker configs alter --entity-type topics|brokers (--entity-name N | --entity-default)
        [--add-config k1=v1,k2=[a,b]] [--delete-config k1,k2]

`--topic T` / `--broker ID` / `--broker-defaults` are short for the entity options.
describe prints, as Kafka's tool, the dynamic configs of the entity (with --all every
config, with its source) and their synonyms; alter applies SET / DELETE operations with
IncrementalAlterConfigs (values in `[...]` may hold commas, as kafka-configs).
`--entity-default` with brokers is the cluster-wide dynamic default (resource name "").
"""
from __future__ import annotations

from mpbroker.cli import admin
from mpbroker.protocol import api_keys as K

# confluent_kafka is imported inside the commands: see mpbroker/cli/admin.py's docstring.

DYNAMIC_SOURCES = {"DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG",
                   "DYNAMIC_DEFAULT_BROKER_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG"}


def parse_config_list(text: str) -> dict[str, str]:
    """`k1=v1,k2=[a,b],k3=v3` (kafka-configs --add-config) -> {k: v}."""
    out, i, n = {}, 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            raise admin.CliError(f"bad --add-config {text!r}: expected k1=v1,k2=[v2,v3]", 2)
        key = text[i:eq].strip()
        j = eq + 1
        if j < n and text[j] == "[":
            end = text.find("]", j)
            if end < 0:
                raise admin.CliError(f"bad --add-config {text!r}: unclosed '['", 2)
            value, j = text[j + 1:end], end + 1
        else:
            end = text.find(",", j)
            end = n if end < 0 else end
            value, j = text[j:end], end
        if not key:
            raise admin.CliError(f"bad --add-config {text!r}: empty key", 2)
        out[key] = value
        if j < n and text[j] != ",":
            raise admin.CliError(f"bad --add-config {text!r} at position {j}", 2)
        i = j + 1
    return out


def _resource(args):
    from confluent_kafka.admin import ResourceType
    etype, name = args.entity_type, args.entity_name
    if args.topic:
        etype, name = "topics", args.topic
    elif args.broker is not None:
        etype, name = "brokers", args.broker
    elif args.broker_defaults or args.entity_default:
        etype, name = etype or "brokers", ""
    if etype not in ("topics", "brokers"):
        raise admin.CliError("give --entity-type topics|brokers (or --topic / --broker)", 2)
    if name is None:
        raise admin.CliError("give --entity-name (or --entity-default)", 2)
    if etype == "topics" and not name:
        raise admin.CliError("topics have no --entity-default", 2)
    return (ResourceType.TOPIC if etype == "topics" else ResourceType.BROKER), etype, name


def _label(etype: str, name: str) -> str:
    if etype == "brokers" and name == "":
        return "the default broker"
    return f"{'topic' if etype == 'topics' else 'broker'} {name}"


def _first_broker(args) -> tuple[str, int]:
    servers = str(admin.client_config(args)["bootstrap.servers"])
    host, _, port = servers.split(",")[0].strip().rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        raise admin.CliError(f"bad --bootstrap-server {args.bootstrap_server!r}", 2)


def _describe_entries(args, rtype, name) -> list[dict]:
    """[{name, value, source, sensitive, read_only, synonyms}] of one resource. The
    cluster-wide broker default (name "") goes over the project's own client:
    librdkafka refuses a resource with an empty name."""
    from confluent_kafka.admin import ConfigResource
    if name == "":
        body = {"resources": [{"resource_type": int(rtype.value), "resource_name": "",
                               "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": False}
        r = _default_call(args, K.DESCRIBE_CONFIGS, body, "results")
        return [{"name": c["name"], "value": None if c["is_sensitive"] else c["value"],
                 "source": _source_name(c.get("config_source", 0)),
                 "sensitive": bool(c["is_sensitive"]), "read_only": bool(c["read_only"]),
                 "synonyms": [{"name": x["name"], "value": x["value"],
                               "source": _source_name(x["source"])}
                              for x in c.get("synonyms") or ()]}
                for c in sorted(r["configs"], key=lambda c: c["name"])]
    client = admin.admin_client(args)
    res = ConfigResource(rtype, name)
    entries = admin.result(client.describe_configs([res], request_timeout=admin.timeout_s(args))[res],
                       args)
    return [{"name": k, "value": None if e.is_sensitive else e.value,
             "source": _source_name(e.source), "sensitive": bool(e.is_sensitive),
             "read_only": bool(e.is_read_only),
             "synonyms": [{"name": s.name, "value": s.value, "source": _source_name(s.source)}
                          for s in (e.synonyms or {}).values()]}
            for k, e in sorted(entries.items())]


def cmd_describe(args) -> int:
    rtype, etype, name = _resource(args)
    out = [c for c in _describe_entries(args, rtype, name)
           if args.all or c["source"] in DYNAMIC_SOURCES]
    if args.json:
        admin.emit_json({"entity_type": etype, "entity_name": name, "configs": out})
        return 0
    print(f"{'All' if args.all else 'Dynamic'} configs for {_label(etype, name)} are:")
    for c in out:
        syn = ", ".join(f"{s['source']}:{s['name']}={s['value']}" for s in c["synonyms"])
        print(f"  {c['name']}={'null' if c['value'] is None else c['value']} "
              f"sensitive={str(c['sensitive']).lower()} synonyms={{{syn}}}")
    return 0


def _source_name(source) -> str:
    """Kafka's ConfigSource name (librdkafka's enum has Kafka's numbers)."""
    from confluent_kafka.admin import ConfigSource
    if isinstance(source, ConfigSource):
        return source.name
    try:
        return ConfigSource(int(source)).name
    except (ValueError, TypeError):
        return str(source)


def cmd_alter(args) -> int:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    rtype, etype, name = _resource(args)
    sets: dict[str, str] = {}
    for item in args.add_config:
        sets.update(parse_config_list(item))
    deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if not sets and not deletes:
        raise admin.CliError("configs alter needs --add-config or --delete-config", 2)
    both = set(sets) & set(deletes)
    if both:
        raise admin.CliError(f"a config cannot be both added and deleted: {', '.join(sorted(both))}", 2)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in sets.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in deletes]
    if name == "":
        _alter_default(args, rtype, sets, deletes)
    else:
        client = admin.admin_client(args)
        res = ConfigResource(rtype, name, incremental_configs=entries)
        admin.result(client.incremental_alter_configs([res], request_timeout=admin.timeout_s(args))[res],
                 args)
    admin.emit(args, {"entity_type": etype, "entity_name": name, "set": sets, "deleted": deletes},
           [f"Completed updating config for {_label(etype, name)}."])
    return 0


def _alter_default(args, rtype, sets: dict, deletes: list) -> None:
    """IncrementalAlterConfigs of the cluster-wide broker default (see _describe_entries)."""
    configs = [{"name": k, "config_operation": 0, "value": v} for k, v in sets.items()]
    configs += [{"name": k, "config_operation": 1, "value": None} for k in deletes]
    body = {"resources": [{"resource_type": int(rtype.value), "resource_name": "",
                           "configs": configs}], "validate_only": False}
    _default_call(args, K.INCREMENTAL_ALTER_CONFIGS, body, "responses")


def _default_call(args, api_key: int, body: dict, results: str) -> dict:
    """`body` (one resource: the broker default) sent to the first broker; its one
    result, or CliError with the result's error."""
    host, port = _first_broker(args)
    resp, = admin.wire_calls(args, "configs for the broker default",
                         [(host, port, api_key, lambda v: body)])
    r = resp[results][0]
    if r["error_code"]:
        raise admin.CliError(f"{admin.error_name(r['error_code'])}: {r.get('error_message') or ''}")
    return r


def register(sub) -> None:
    p = sub.add_parser("configs", help="describe or alter topic and broker configs")
    p.add_argument("action", choices=("describe", "alter"))
    p.add_argument("--entity-type", choices=("topics", "brokers"))
    p.add_argument("--entity-name")
    p.add_argument("--entity-default", action="store_true",
                   help="brokers: the cluster-wide default")
    p.add_argument("--topic", help="short for --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", help="short for --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true",
                   help="short for --entity-type brokers --entity-default")
    p.add_argument("--all", action="store_true", help="describe: every config, not only dynamic ones")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=[V,V]]")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    admin.add_common(p)
    p.set_defaults(func=lambda a: admin.run({"describe": cmd_describe, "alter": cmd_alter}[a.action], a))
