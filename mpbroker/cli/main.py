"""The `mpbroker` command.

    mpbroker serve -c conf/server.properties [--override key=value]...
    mpbroker dump-log PATH [--records]       (a .log segment, or a .txnindex)
    mpbroker placement show|move|balance|history -c conf/server.properties [--json] ...

`serve` runs the supervisor (`mpbroker.supervisor`), which forks the controller (the
embedded metadata store, no ZooKeeper: `<log.dirs[0]>/__mpbroker_metadata/`) and the
workers that serve the listener; it stays in the foreground, talks to systemd when
`NOTIFY_SOCKET` is set, and handles SIGTERM (controlled shutdown), SIGINT (fast stop)
and SIGHUP (reload).

Exit codes: 0 clean stop, 2 bad configuration or arguments (a clear message on stderr),
1 anything else.
"""
from __future__ import annotations

import argparse
import logging
import sys


def cmd_serve(args) -> int:
    from mpbroker import config as configmod
    from mpbroker.supervisor import Supervisor

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
        level=getattr(logging, str(cfg.get("log.level", "INFO")).upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    try:
        listener = cfg.listeners[0]
        advertised = cfg.advertised_listeners[0]
    except (configmod.ConfigError, IndexError) as e:
        print(f"mpbroker: bad listeners: {e}", file=sys.stderr)
        return 2
    host, port = listener.host or "0.0.0.0", listener.port
    try:
        supervisor = Supervisor(cfg, load_config=load)
    except configmod.ConfigError as e:
        print(f"mpbroker: {e}", file=sys.stderr)
        return 2
    try:
        supervisor.bind(host, port, advertised.host, advertised.port)
    except OSError as e:
        print(f"mpbroker: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 2
    return supervisor.run()


def cmd_dump_log(args) -> int:
    """Print the batches (and with --records the records) of a segment file."""
    from storage.batch import iter_batches
    from storage import errors as serr
    if args.path.endswith(".txnindex"):
        return _dump_txn_index(args.path)
    with open(args.path, "rb") as f:
        data = memoryview(f.read())
    pos = 0
    try:
        for b in iter_batches(data, allow_partial_tail=True):
            print(f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} "
                  f"count: {b.record_count} position: {pos} size: {b.size} "
                  f"magic: {b.magic} compresscodec: {b.compression} crc: {b.crc} "
                  f"isTransactional: {b.is_transactional} isControl: {b.is_control} "
                  f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
                  f"baseSequence: {b.base_sequence} maxTimestamp: {b.max_timestamp}")
            if args.records and b.is_control:
                from storage.producer_state import read_end_txn_marker
                try:
                    m = read_end_txn_marker(b)
                    print(f"| offset: {b.base_offset} endTxnMarker: "
                          f"{'COMMIT' if m.commit else 'ABORT'} "
                          f"coordinatorEpoch: {m.coordinator_epoch}")
                except serr.StorageError as e:
                    print(f"| offset: {b.base_offset} unknown control record: {e}")
            elif args.records:
                for r in b.records():
                    print(f"| offset: {r.offset} CreateTime: {r.timestamp} "
                          f"key: {r.key!r} value: {r.value!r} headers: {list(r.headers)}")
            pos += b.size
    except serr.StorageError as e:
        print(f"stopped at position {pos}: {e}")
        return 1
    return 0


def _dump_txn_index(path: str) -> int:
    """A `.txnindex` (storage/txn_index.py) as Kafka's DumpLogSegments prints it."""
    from storage.txn_index import ENTRY, ENTRY_SIZE
    with open(path, "rb") as f:
        data = f.read()
    for i in range(len(data) // ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, i * ENTRY_SIZE)
        print(f"version: {version} producerId: {pid} firstOffset: {first} "
              f"lastOffset: {last} lastStableOffset: {lso}")
    if len(data) % ENTRY_SIZE:
        print(f"stopped at position {len(data) - len(data) % ENTRY_SIZE}: partial entry")
        return 1
    return 0


def _admin_call(cfg_path: str, overrides: list[str], request: dict, timeout: float) -> dict:
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
                lambda: _admin_call(args.config, args.override,
                                    {"cmd": "show", "interval": args.interval},
                                    args.interval + 15), thr, args.count)
        if args.action == "history":
            out = _admin_call(args.config, args.override,
                              {"cmd": "history", "limit": args.limit}, 15)
        elif args.action == "show":
            out = _admin_call(args.config, args.override,
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
            out = _admin_call(args.config, args.override,
                              {"cmd": "move", "topic": topic, "partition": int(part),
                               "worker": int(args.args[1]),
                               "include_pinned": args.include_pinned}, 60)
        else:
            out = _admin_call(args.config, args.override,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mpbroker", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the broker")
    p.add_argument("-c", "--config", required=True, help="server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("dump-log", help="print the batches of a segment file")
    p.add_argument("path")
    p.add_argument("--records", action="store_true")
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
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
