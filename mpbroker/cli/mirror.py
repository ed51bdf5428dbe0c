"""`mpbroker mirror`: MirrorMaker 2 (dedicated mode) between Kafka-compatible clusters.

    mpbroker mirror -c mm2.properties [--clusters B,C] [--workers N] [--name NAME]
                    [--progress-interval S] [--metrics-listener http://HOST:PORT]
    mpbroker mirror -c mm2.properties --status [--json]

Runs every enabled flow of the file whose target is in --clusters (default: all), as
MM2 does (mpbroker/mirror/, docs/MIRROR.md). Exit codes: 0 stopped by SIGTERM/SIGINT,
2 bad configuration or arguments (one line on stderr), 1 anything else (--status: a
cluster unreachable).
"""
from __future__ import annotations

import argparse
import json
import logging
import socket
import sys


def register(sub) -> None:
    p = sub.add_parser("mirror", help="mirror topics, groups and offsets between clusters "
                                      "(MirrorMaker 2's mm2.properties)")
    p.add_argument("-c", "--config", required=True, help="mm2.properties (MM2 dedicated mode)")
    p.add_argument("--clusters", default="",
                   help="comma-separated target clusters to run the flows into (default: all)")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes on this machine, each a member of the flows' groups")
    p.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--name", default=socket.gethostname(),
                   help="this process's name in client ids (default: the host name)")
    p.add_argument("--progress-interval", type=float, default=30.0,
                   help="seconds between the per-topic progress and lag log lines")
    p.add_argument("--metrics-listener", default=None, metavar="http://HOST:PORT",
                   help="serve Prometheus metrics there (--workers N: worker i on PORT+i)")
    p.add_argument("--status", action="store_true",
                   help="print each flow's group state and lag per topic, and exit")
    p.add_argument("--json", action="store_true", help="--status: print JSON")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=cmd_mirror)


def cmd_mirror(args) -> int:
    from mpbroker.mirror.config import MirrorConfig, MirrorConfigError
    from mpbroker.mirror import runner
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    if args.workers < 1:
        print("mpbroker mirror: --workers must be at least 1", file=sys.stderr)
        return 2
    targets = [c.strip() for c in args.clusters.split(",") if c.strip()]
    metrics = None
    if args.metrics_listener:
        from mpbroker.config import parse_http_listener
        try:
            metrics = parse_http_listener(args.metrics_listener)
        except ValueError as e:
            print(f"mpbroker mirror: --metrics-listener {args.metrics_listener}: {e}", file=sys.stderr)
            return 2
    try:
        cfg = MirrorConfig.from_file(args.config, targets)
    except MirrorConfigError as e:
        print(f"mpbroker mirror: {e}", file=sys.stderr)
        return 2
    if args.worker_index in (None, 0):
        for w in cfg.warnings:
            logging.getLogger("mpbroker.mirror.config").warning("%s", w)
    if args.status:
        from mpbroker.mirror.status import all_status, render
        out = all_status(cfg.flows)
        print(json.dumps(out, indent=2) if args.json else render(out))
        return 1 if any("error" in s for s in out) else 0
    if args.workers > 1 and args.worker_index is None:
        argv = ["-c", args.config, "--name", args.name, "--progress-interval",
                str(args.progress_interval), "--log-level", args.log_level]
        if targets:
            argv += ["--clusters", ",".join(targets)]
        return runner.run_parent(runner.child_command(argv), args.workers, metrics)
    member = args.name if args.worker_index is None else f"{args.name}-{args.worker_index}"
    try:
        return runner.run_workers(cfg, member=member, checkpoints=args.worker_index in (None, 0),
                                  progress_interval_s=args.progress_interval, metrics=metrics)
    except MirrorConfigError as e:
        print(f"mpbroker mirror: {e}", file=sys.stderr)
        return 2
