"""`mpbroker quotas describe|alter`: client quotas, as kafka-configs.sh manages them.

    mpbroker quotas alter --entity-type clients --entity-name app \\
        --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048'
    mpbroker quotas alter --entity-type users --entity-default --delete-config request_percentage
    mpbroker quotas alter --entity-type users --entity-name alice \\
        --entity-type clients --entity-name app --add-config producer_byte_rate=4096
    mpbroker quotas describe [--entity-type users|clients [--entity-name X|--entity-default]]...

Entity types `users` / `clients` (kafka-configs' names; `user` / `client-id` on the
wire); each --entity-type takes the next --entity-name or --entity-default. describe
with names matches those entities exactly (strict); a type without a name lists every
named entity of the type; no type lists everything. Keys: producer_byte_rate,
consumer_byte_rate, request_percentage, controller_mutation_rate.

Neither confluent-kafka nor kafka-python offers the client quota admin APIs, so the
requests (DescribeClientQuotas 48, AlterClientQuotas 49) go through the project's own
protocol client (`admin.wire_calls`) to the first bootstrap server; any broker answers.
"""
from __future__ import annotations

from mpbroker.cli import admin
from mpbroker.protocol import api_keys as K
from mpbroker.security import quotas as q

ENTITY_TYPES = {"users": q.USER, "clients": q.CLIENT_ID}
_NAME_OF = {q.USER: "user-principal", q.CLIENT_ID: "client-id"}


def entities(args) -> list[tuple[str, str | None, bool]]:
    """[(wire entity type, name or None, whether a name or the default was given)]."""
    types = args.entity_type or []
    names = list(args.entity_names or [])
    if len(names) > len(types):
        raise admin.CliError("each --entity-name / --entity-default needs an --entity-type", 2)
    out = []
    for i, t in enumerate(types):
        given = i < len(names)
        out.append((ENTITY_TYPES[t], names[i] if given else None, given))
    return out


def parse_add(items) -> list[tuple[str, float]]:
    out = []
    for item in items or ():
        for kv in (x for x in item.split(",") if x.strip()):
            k, sep, v = kv.partition("=")
            try:
                out.append((k.strip(), float(v)))
            except ValueError:
                raise admin.CliError(f"bad --add-config {kv!r}: expected key=number", 2)
            if not sep:
                raise admin.CliError(f"bad --add-config {kv!r}: expected key=number", 2)
    return out


def parse_delete(items) -> list[str]:
    return [k.strip() for item in items or () for k in item.split(",") if k.strip()]


def alter_body(ents, add, delete, validate_only=False) -> dict:
    return {"validate_only": validate_only, "entries": [{
        "entity": [{"entity_type": t, "entity_name": n} for t, n, _ in ents],
        "ops": [{"key": k, "value": v, "remove": False} for k, v in add]
        + [{"key": k, "value": 0.0, "remove": True} for k in delete]}]}


def describe_body(ents) -> dict:
    comps = []
    for t, n, given in ents:
        if not given:
            comps.append({"entity_type": t, "match_type": q.MATCH_SPECIFIED, "match": None})
        elif n is None:
            comps.append({"entity_type": t, "match_type": q.MATCH_DEFAULT, "match": None})
        else:
            comps.append({"entity_type": t, "match_type": q.MATCH_EXACT, "match": n})
    return {"components": comps, "strict": bool(ents) and all(g for _, _, g in ents)}


def _call(args, what: str, key: int, body: dict) -> dict:
    first = admin.client_config(args)["bootstrap.servers"].split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return admin.wire_calls(args, what, [(host or "127.0.0.1", int(port), key, lambda v: body)])[0]


def describe_entity(entity) -> str:
    parts = []
    for e in entity:
        t, n = e["entity_type"], e["entity_name"]
        label = _NAME_OF.get(t, t)
        parts.append(f"the default {label}" if n is None else f"{label} '{n}'")
    return ", ".join(parts)


def cmd_describe(args) -> int:
    resp = _call(args, "quotas describe", K.DESCRIBE_CLIENT_QUOTAS, describe_body(entities(args)))
    if resp["error_code"]:
        raise admin.CliError(f"{admin.error_name(resp['error_code'])}: {resp['error_message']}")
    found = [{"entity": {e["entity_type"]: e["entity_name"] for e in r["entity"]},
              "quotas": {v["key"]: v["value"] for v in r["values"]}}
             for r in resp["entries"] or ()]

    def lines():
        for r, raw in zip(found, resp["entries"] or ()):
            values = ", ".join(f"{k}={v}" for k, v in sorted(r["quotas"].items()))
            yield f"Quota configs for {describe_entity(raw['entity'])} are {values}"
    admin.emit(args, {"version": 1, "entries": found}, lines())
    return 0


def cmd_alter(args) -> int:
    ents = entities(args)
    if not ents or not all(given for _, _, given in ents):
        raise admin.CliError("alter needs --entity-type with --entity-name or --entity-default", 2)
    add, delete = parse_add(args.add_config), parse_delete(args.delete_config)
    if not add and not delete:
        raise admin.CliError("alter needs --add-config and/or --delete-config", 2)
    resp = _call(args, "quotas alter", K.ALTER_CLIENT_QUOTAS,
                 alter_body(ents, add, delete, args.validate_only))
    entry = resp["entries"][0]
    if entry["error_code"]:
        raise admin.CliError(f"{admin.error_name(entry['error_code'])}: {entry['error_message']}")
    what = describe_entity([{"entity_type": t, "entity_name": n} for t, n, _ in ents])
    admin.emit(args, {"version": 1, "altered": True}, [
        f"Completed updating config for {what}." if not args.validate_only
        else f"Validated config for {what}."])
    return 0


def register(sub) -> None:
    p = sub.add_parser("quotas", help="client quotas (DescribeClientQuotas, AlterClientQuotas)")
    actions = p.add_subparsers(dest="quotas_action", metavar="{describe,alter}", required=True)
    for name, func in (("describe", cmd_describe), ("alter", cmd_alter)):
        a = actions.add_parser(name, help=f"{name} client quotas")
        a.add_argument("--entity-type", action="append", choices=sorted(ENTITY_TYPES))
        a.add_argument("--entity-name", action="append", dest="entity_names")
        a.add_argument("--entity-default", action="append_const", const=None, dest="entity_names")
        if name == "alter":
            a.add_argument("--add-config", action="append", metavar="K=V[,K=V]")
            a.add_argument("--delete-config", action="append", metavar="K[,K]")
            a.add_argument("--validate-only", action="store_true",
                           help="check the change without making it")
        admin.add_common(a)
        a.set_defaults(func=lambda args, f=func: admin.run(f, args))
    p.set_defaults(func=lambda args: p.print_help() or 2)
