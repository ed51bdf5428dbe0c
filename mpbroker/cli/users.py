"""`mpbroker users add|remove|list`: SCRAM users (kafka-configs.sh --entity-type users).

    mpbroker users add NAME [--password PW | --password-file FILE] [--mechanism M]...
                            [--iterations N] [--add-config 'SCRAM-SHA-256=[iterations=8192,password=PW]']
    mpbroker users remove NAME [--mechanism M]...
    mpbroker users list [NAME...]

Through the Admin API (AlterUserScramCredentials / DescribeUserScramCredentials,
KIP-554) of a running broker, with `--bootstrap-server` and `--command-config` (any
security.protocol / sasl.* / ssl.* the client library speaks). The password is read
from --password, --password-file, else from the terminal (or one line of stdin); the
salted password is computed here, as Kafka's tools do, so it never travels in clear.
`add` sets both SCRAM-SHA-256 and SCRAM-SHA-512 unless --mechanism or --add-config
(Kafka's syntax) names them; `remove` removes every mechanism the user has unless
--mechanism names some.

`add --offline -c server.properties` writes the user into the embedded metadata store
of a stopped broker (no ZooKeeper): the bootstrap of the first admin user of a broker
whose listeners all require SASL. It refuses while the broker runs (the log dir lock).
"""
from __future__ import annotations

import getpass
import os
import sys

from mpbroker import config as configmod
from mpbroker.cli import admin
from mpbroker.cli.configs import parse_config_list
from mpbroker.log_dir_lock import LogDirError, lock_dir
from mpbroker.metadata import model, store
from mpbroker.security import scram_credentials as sc

MECHANISMS = tuple(sc.MECHANISMS)


def scram_configs(args) -> dict[str, dict]:
    """mechanism -> {"iterations": n, "password": pw or None} from the options."""
    out: dict[str, dict] = {}
    if args.add_config:
        for mech, value in parse_config_list(args.add_config).items():
            if mech not in sc.MECHANISMS:
                raise admin.CliError(f"UNSUPPORTED_SASL_MECHANISM: {mech} (one of "
                                     f"{', '.join(MECHANISMS)})", 2)
            props = parse_config_list(value) if value else {}
            try:
                out[mech] = {"iterations": int(props.get("iterations", args.iterations)),
                             "password": props.get("password")}
            except ValueError:
                raise admin.CliError(f"bad iterations in --add-config for {mech}", 2) from None
    for mech in args.mechanism or ([] if out else MECHANISMS):
        out.setdefault(mech, {"iterations": args.iterations, "password": None})
    return out


def read_password(args) -> str:
    if args.password is not None:
        return args.password
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise admin.CliError(f"cannot read --password-file: {e.strerror or e}", 2) from None
    if sys.stdin.isatty():
        return getpass.getpass(f"Password for {args.name}: ")
    return sys.stdin.readline().rstrip("\r\n")


def _credentials(args) -> list[tuple[str, int, str]]:
    configs = scram_configs(args)
    password = None
    out = []
    for mech, c in configs.items():
        pw = c["password"]
        if pw is None:
            password = read_password(args) if password is None else password
            pw = password
        if not pw:
            raise admin.CliError("UNACCEPTABLE_CREDENTIAL: the password must not be empty", 2)
        out.append((mech, c["iterations"], pw))
    return out


def _alter(args, alterations) -> None:
    client = admin.admin_client(args)
    for user, fut in client.alter_user_scram_credentials(
            alterations, request_timeout=admin.timeout_s(args)).items():
        admin.result(fut, args)


def cmd_add(args) -> int:
    creds = _credentials(args)
    if args.offline:
        return _add_offline(args, creds)
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    _alter(args, [UserScramCredentialUpsertion(
        args.name, ScramCredentialInfo(ScramMechanism[m.replace("-", "_")], n), pw.encode())
        for m, n, pw in creds])
    admin.emit(args, {"user": args.name, "added": [m for m, _, _ in creds]},
               [f"Added SCRAM credentials of user {args.name}: {', '.join(m for m, _, _ in creds)}"])
    return 0


def _described(args, names):
    client = admin.admin_client(args)
    got = client.describe_user_scram_credentials(names or None,
                                                 request_timeout=admin.timeout_s(args))
    if names:
        return {u: admin.result(f, args) for u, f in got.items()}
    return admin.result(got, args)


def cmd_remove(args) -> int:
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion
    mechs = args.mechanism
    if not mechs:
        desc = _described(args, [args.name])[args.name]
        mechs = [i.mechanism.name.replace("_", "-") for i in desc.scram_credential_infos]
    _alter(args, [UserScramCredentialDeletion(args.name, ScramMechanism[m.replace("-", "_")])
                  for m in mechs])
    admin.emit(args, {"user": args.name, "removed": list(mechs)},
               [f"Removed SCRAM credentials of user {args.name}: {', '.join(mechs)}"])
    return 0


def cmd_list(args) -> int:
    descs = _described(args, args.names)
    users = [{"user": u, "credentials": [
        {"mechanism": i.mechanism.name.replace("_", "-"), "iterations": i.iterations}
        for i in d.scram_credential_infos]} for u, d in sorted(descs.items())]

    def lines():
        for u in users:
            creds = ",".join(f"{c['mechanism']}=iterations={c['iterations']}" for c in u["credentials"])
            yield f"SCRAM credential configs for user-principal '{u['user']}' are {creds}"
    admin.emit(args, {"users": users}, lines())
    return 0


def _add_offline(args, creds) -> int:
    if not args.config:
        raise admin.CliError("--offline needs -c/--config server.properties", 2)
    try:
        cfg = configmod.BrokerConfig.from_file(args.config, [])
    except (configmod.ConfigError, OSError) as e:
        raise admin.CliError(f"bad config {args.config}: {e}", 2) from None
    if cfg.get("zookeeper.connect"):
        raise admin.CliError("--offline writes the embedded store; with zookeeper.connect, add "
                             "users through a running broker", 2)
    log_dir = cfg.log_dirs[0]
    os.makedirs(log_dir, exist_ok=True)
    try:
        fd = lock_dir(log_dir)
    except LogDirError as e:
        raise admin.CliError(f"{e} (is the broker running? stop it, or leave out --offline)", 1) from None
    try:
        s = store.MetadataStore(log_dir)
        md = s.load() or model.new_cluster_metadata()
        changes = {args.name: {m: sc.credential_from_password(sc.mechanism(m), pw, n)
                               for m, n, pw in creds}}
        s.save(model.set_scram_credentials(md, changes))
    finally:
        os.close(fd)
    admin.emit(args, {"user": args.name, "added": [m for m, _, _ in creds]},
               [f"Added SCRAM credentials of user {args.name} to {log_dir} (offline): "
                f"{', '.join(m for m, _, _ in creds)}"])
    return 0


def register(sub) -> None:
    p = sub.add_parser("users", help="SCRAM users: add, remove, list")
    verbs = p.add_subparsers(dest="verb", required=True)
    a = verbs.add_parser("add", help="add a user or change its password")
    a.add_argument("name")
    a.add_argument("--password", help="the password (else --password-file, the terminal or stdin)")
    a.add_argument("--password-file", metavar="FILE", help="a file whose first line is the password")
    a.add_argument("--mechanism", action="append", choices=MECHANISMS,
                   help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default both)")
    a.add_argument("--iterations", type=int, default=sc.DEFAULT_ITERATIONS,
                   help=f"4096..16384 (default {sc.DEFAULT_ITERATIONS})")
    a.add_argument("--add-config", metavar="'SCRAM-SHA-256=[iterations=N,password=PW]'",
                   help="kafka-configs' syntax")
    a.add_argument("--offline", action="store_true",
                   help="write a stopped embedded broker's metadata store (needs -c)")
    a.add_argument("-c", "--config", help="server.properties (with --offline)")
    r = verbs.add_parser("remove", help="remove a user's SCRAM credentials")
    r.add_argument("name")
    r.add_argument("--mechanism", action="append", choices=MECHANISMS,
                   help="the mechanism to remove (repeatable; default every one the user has)")
    ls = verbs.add_parser("list", help="users and their SCRAM mechanisms and iterations")
    ls.add_argument("names", nargs="*", metavar="NAME")
    for q, fn in ((a, cmd_add), (r, cmd_remove), (ls, cmd_list)):
        admin.add_common(q)
        q.set_defaults(func=lambda args, fn=fn: admin.run(fn, args))
