"""The `mpbroker` command.

    mpbroker serve -c conf/server.properties [--override key=value]...
    mpbroker dump-log FILE... [--print-data-log] [--offsets-decoder] ...   (kafka-dump-log.sh)
    mpbroker placement show|move|balance|history -c conf/server.properties [--json] ...
    mpbroker topics|groups|configs|offsets|log-dirs|produce|consume|cluster|acls ...
                                             (admin CLI over the wire: mpbroker/cli/admin.py)
    mpbroker mirror -c mm2.properties [--workers N] [--status]   (MirrorMaker 2: mpbroker/cli/mirror.py)

`serve` runs the supervisor (`mpbroker.supervisor`), which forks the controller (the
embedded metadata store, no ZooKeeper: `<log.dirs[0]>/__mpbroker_metadata/`) and the
workers that serve the listener; it stays in the foreground, talks to systemd when
`NOTIFY_SOCKET` is set, and handles SIGTERM (controlled shutdown), SIGINT (fast stop)
and SIGHUP (reload).

Before it forks anything, `serve` validates the config (unknown keys are warned about,
an authorizer other than the ACL one is refused; each TLS/SASL listener's settings are
loaded, a bad one exits 2 with one line), checks that every log dir is a
usable directory and locks it (`mpbroker/log_dir_lock.py`; the lock is inherited by
the children and released when the last process of the broker exits).
`serve --help-config` prints every key.

Exit codes: 0 clean stop, 2 bad configuration or arguments, an unusable or locked log
dir, a port in use (one line on stderr), 1 anything else.

Each command imports what it runs inside its function: start-up time, so that
`mpbroker --help`, `dump-log` and the admin tools do not load the broker (importing
`mpbroker.supervisor` alone takes about a second).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from mpbroker.cli import (acls, cluster, configs, console, dump_log, groups, log_dirs, mirror, offsets,
                          quotas, topics, users)


def cmd_serve(args) -> int:
    from mpbroker import config as configmod
    from mpbroker.log_dir_lock import LogDirError, claim_log_dirs
    from mpbroker.supervisor import Supervisor
    from workers.listener_security import SecurityConfigError, listener_securities

    if args.help_config:
        sys.stdout.write(configmod.describe_keys_text())
        return 0
    if not args.config:
        print("mpbroker serve: the following arguments are required: -c/--config", file=sys.stderr)
        return 2

    def load():
        return configmod.BrokerConfig.from_file(args.config, args.override)

    try:
        cfg = load()
    except configmod.ConfigError as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"mpbroker: cannot read config {args.config}: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, str(cfg["log.level"]).upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("mpbroker.config")
    for name in cfg.unknown:
        log.warning("%s", configmod.unknown_config_warning(name))
    for name in cfg.ignored:
        log.info("The configuration '%s' is a Kafka config that mpbroker does not use; ignored.", name)
    try:
        listeners = _listeners_in_bind_order(cfg)
        listener_securities(cfg, [(e.listener_name, e.security_protocol) for e, _ in listeners])
    except (configmod.ConfigError, IndexError) as e:
        print(f"mpbroker: bad listeners: {e}", file=sys.stderr)
        return 2
    except SecurityConfigError as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return 2
    try:
        supervisor = Supervisor(cfg, load_config=load)
    except configmod.ConfigError as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return 2
    try:
        # Held (inherited by every forked child) until the whole process tree has exited.
        locks = claim_log_dirs(cfg.log_dirs, on_offline=lambda e: logging.getLogger(
            "mpbroker.log_dirs").error("%s: offline, the broker starts on the other log dirs",
                                       e))
    except LogDirError as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return 2
    problem = _admin_socket_problem(cfg.admin_socket)
    if problem:
        locks.release()
        print(f"mpbroker: {problem}", file=sys.stderr)
        return 2
    for listener, advertised in listeners:
        host, port = listener.host or "0.0.0.0", listener.port
        try:
            supervisor.bind(host, port, advertised.host if advertised else host,
                            advertised.port if advertised else port,
                            listener.listener_name, listener.security_protocol,
                            advertise=advertised is not None)
        except OSError as e:
            locks.release()
            print(f"mpbroker: cannot listen on {host}:{port}: {e}", file=sys.stderr)
            return 2
    from mpbroker.proctitle import set_title
    set_title("supervisor")
    try:
        return supervisor.run()
    finally:
        locks.release()


def _listeners_in_bind_order(cfg) -> list:
    """[(listener Endpoint, its advertised Endpoint or None)], the inter-broker listener
    first (the address the controller registers); a broker without other brokers may
    have no inter-broker listener (then the first listener leads)."""
    from mpbroker import config as configmod
    listeners = cfg.listeners
    if not listeners:
        raise IndexError("no listener")
    advertised = {e.listener_name: e for e in cfg.advertised_listeners}
    try:
        lead = cfg.inter_broker_listener.listener_name
    except configmod.ConfigError:
        if cfg.uses_zookeeper:
            raise
        lead = listeners[0].listener_name
    ordered = sorted(listeners, key=lambda e: e.listener_name != lead)
    return [(e, advertised.get(e.listener_name)) for e in ordered]


def _admin_socket_problem(path: str) -> str | None:
    """Why `admin.socket` cannot be served by this broker, or None. The controller
    replaces a stale socket file at start, so a live one (another broker configured
    with the same path) must be refused here, before anything is forked."""
    import socket

    from mpbroker.controller.placement import unix_path
    from mpbroker.log_dir_lock import LogDirError, check_usable
    try:
        check_usable(os.path.dirname(path))
    except LogDirError as e:
        return f"admin.socket {path}: {str(e).replace('log dir', 'directory', 1)}"
    if os.path.exists(path):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2.0)
            try:
                s.connect(unix_path(path))
            except OSError:
                return None                 # stale: nobody answers
        return f"admin.socket {path} is served by another running broker"
    return None


def cmd_dump_log(args) -> int:
    """Print segments, indexes, snapshots and checkpoints (mpbroker/cli/dump_log.py)."""
    return dump_log.run(args)


def admin_call(cfg_path: str, overrides: list[str], request: dict, timeout: float) -> dict:
    """One request to the running broker's admin socket (served by its controller
    process, see mpbroker/controller/placement.py), found from the config file."""
    import json
    import socket

    from mpbroker import config as configmod
    from mpbroker.controller.placement import unix_path
    cfg = configmod.BrokerConfig.from_file(cfg_path, overrides)
    path = cfg.admin_socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(unix_path(path))
        except OSError as e:
            raise ConnectionError(f"no broker answers on {path} ({e}): is it running with this config?")
        s.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    resp = json.loads(data or b"{}")
    if "error" in resp:
        raise ValueError(resp["error"])
    return resp.get("ok")


def _rate(v: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(v) < 1024 or unit == "GB":
            return f"{v:.1f} {unit}/s" if unit != "B" else f"{v:.0f} B/s"
        v /= 1024
    return str(v)


def cmd_placement(args) -> int:
    """show: per worker pid, core, partitions, bytes in/out per second, requests per
    second, CPU % (psutil), purgatory sizes; move TOPIC-PARTITION WORKER: a live move;
    balance: the fewest moves that bring every worker within placement.balance.threshold
    of the mean load (bytes, requests, CPU); show --watch: live per-worker load; history:
    the moves made. Partitions pinned by `placement.*` config are neither moved nor
    balanced without --include-pinned."""
    import json
    from mpbroker import config as configmod
    from mpbroker.cli import placement_view
    try:
        if args.action == "show" and args.watch:
            thr = configmod.BrokerConfig.from_file(args.config, args.override)[
                "placement.balance.threshold"]
            return placement_view.watch(
                lambda: admin_call(args.config, args.override,
                                    {"cmd": "show", "interval": args.interval},
                                    args.interval + 15), thr, args.count)
        if args.action == "history":
            out = admin_call(args.config, args.override,
                              {"cmd": "history", "limit": args.limit}, 15)
        elif args.action == "show":
            out = admin_call(args.config, args.override,
                              {"cmd": "show", "interval": args.interval}, args.interval + 15)
        elif args.action == "move":
            if len(args.args) != 2:
                print("usage: mpbroker placement move TOPIC-PARTITION WORKER -c FILE",
                      file=sys.stderr)
                return 2
            topic, _, part = args.args[0].rpartition("-")
            if not topic or not part.isdigit() or not args.args[1].isdigit():
                print(f"mpbroker: bad partition {args.args[0]!r} or worker {args.args[1]!r}",
                      file=sys.stderr)
                return 2
            out = admin_call(args.config, args.override,
                              {"cmd": "move", "topic": topic, "partition": int(part),
                               "worker": int(args.args[1]),
                               "include_pinned": args.include_pinned}, 60)
        else:
            out = admin_call(args.config, args.override,
                              {"cmd": "balance", "interval": args.interval,
                               "dry_run": args.dry_run, "include_pinned": args.include_pinned,
                               "threshold": args.threshold},
                              args.interval + 120)
    except (ConnectionError, ValueError, OSError, configmod.ConfigError) as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if args.action == "history":
        print(placement_view.render_history(out))
    elif args.action == "show":
        print(f"placement revision {out['revision']}, {out['num_workers']} workers, "
              f"rates over {out['interval_s']:g}s")
        print(f"{'worker':>6} {'pid':>7} {'core':>5} {'parts':>5} {'in':>12} {'out':>12} "
              f"{'req/s':>8} {'cpu%':>6} {'purg p/f/d':>11} {'conns':>5}")
        for w in out["workers"]:
            pg = w["purgatory"]
            print(f"{w['worker']:>6} {w['pid']:>7} {','.join(map(str, w['cores'])):>5} "
                  f"{w['num_partitions']:>5} {_rate(w['bytes_in_per_s']):>12} "
                  f"{_rate(w['bytes_out_per_s']):>12} {w['requests_per_s']:>8.1f} "
                  f"{w['cpu_percent']:>6.1f} "
                  f"{pg['produce']:>3}/{pg['fetch']}/{pg['delete_records']:<3} "
                  f"{len(w['connections']):>5}")
        if args.partitions:
            for w in out["workers"]:
                for p in w["partitions"]:
                    print(f"  {p['topic']}-{p['partition']}: worker {w['worker']} "
                          f"in {_rate(p['bytes_in_per_s'])} out {_rate(p['bytes_out_per_s'])} "
                          f"{p.get('requests_per_s', 0.0):.1f} req/s")
    elif args.action == "move":
        for m in out["moved"]:
            print(f"moved {m['topic']}-{m['partition']} from worker {m['from']} to worker {m['to']}")
        if not out["moved"]:
            print("nothing to move: the partition is already there")
        print(f"unavailable for {out['unavailable_ms']:.1f} ms (placement revision {out['revision']})")
    else:
        for m in out["moves"]:
            print(f"{'would move' if args.dry_run else 'move'} {m['topic']}-{m['partition']} "
                  f"from worker {m['from']} to worker {m['to']}")
        if not out["moves"]:
            print(f"nothing to move: imbalance {out['imbalance_before']:.0%} "
                  f"(threshold {out['threshold']:.0%})")
        if out.get("pinned_kept"):
            print(f"kept where the config pins them: {', '.join(out['pinned_kept'])}")
        print("load share before: " + ", ".join(
            f"w{k}={v:.0%}" for k, v in out["load_before"].items())
            + f" (imbalance {out['imbalance_before']:.0%})")
        print("load share after (est.): " + ", ".join(
            f"w{k}={v:.0%}" for k, v in out["load_after_estimate"].items())
            + f" (imbalance {out['imbalance_after_estimate']:.0%})")
        if "result" in out:
            print(f"unavailable for {out['result']['unavailable_ms']:.1f} ms")
    return 0


def _version() -> str:
    from importlib import metadata
    try:
        return f"mpbroker {metadata.version('mpbroker')}"
    except metadata.PackageNotFoundError:   # run from a source tree that is not installed
        return "mpbroker (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mpbroker", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the broker")
    p.add_argument("-c", "--config", help="server.properties file (required)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable)")
    p.add_argument("--help-config", action="store_true",
                   help="print every config key with its type, default and documentation, and exit")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("dump-log", help="print segment, index, snapshot and checkpoint files "
                                         "(kafka-dump-log.sh)")
    dump_log.add_arguments(p)
    p.set_defaults(func=cmd_dump_log)
    p = sub.add_parser("placement", help="show or change which worker owns each partition")
    p.add_argument("action", choices=("show", "move", "balance", "history"))
    p.add_argument("args", nargs="*", help="move: TOPIC-PARTITION WORKER")
    p.add_argument("-c", "--config", required=True, help="the running broker's server.properties")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--interval", type=float, default=1.0, help="seconds to measure rates over")
    p.add_argument("--partitions", action="store_true", help="show: list every partition")
    p.add_argument("--dry-run", action="store_true", help="balance: only print the moves")
    p.add_argument("--include-pinned", action="store_true",
                   help="move/balance: also partitions that placement.* config pins")
    p.add_argument("--threshold", type=float, default=None,
                   help="balance: this imbalance instead of placement.balance.threshold")
    p.add_argument("--watch", action="store_true", help="show: redraw the live load until Ctrl-C")
    p.add_argument("--count", type=int, default=0, help="show --watch: stop after N screens")
    p.add_argument("--limit", type=int, default=100, help="history: the newest N moves")
    p.set_defaults(func=cmd_placement)
    for admin_command in (topics, groups, configs, offsets, log_dirs, console, cluster,
                          mirror, users, acls, quotas):
        admin_command.register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
