"""The `mpbroker` command.

    mpbroker serve -c conf/server.properties [--override key=value]...
    mpbroker dump-log PATH [--records]

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
import asyncio
import logging
import os
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
            if args.records:
                for r in b.records():
                    print(f"| offset: {r.offset} CreateTime: {r.timestamp} "
                          f"key: {r.key!r} value: {r.value!r} headers: {list(r.headers)}")
            pos += b.size
    except serr.StorageError as e:
        print(f"stopped at position {pos}: {e}")
        return 1
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
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
