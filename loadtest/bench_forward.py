"""Forwarded produce vs local produce, by throughput AND by broker CPU per MB.

    .venv/bin/python -m loadtest.bench_forward [--mb 32] [--min-each 3] [--max-trials 30]
                                              [--tree DIR]...

One broker per `--tree` (a checkout of this repository; default: this one), each with
num.workers=2 and `placement.fwd-bench=0` (every partition on worker 0), run side by side.
Trials alternate over the brokers; each opens a fresh confluent-kafka producer (own
client.id), asks the broker which worker its connection landed on (local: worker 0,
remote: worker 1, every produce forwarded over the mesh), and produces `--mb` MB of
`--size`-byte records round-robin over `--partitions` partitions (loadtest/bench_workers
settings: linger.ms=5, batch.size=1 MiB, acks=1). Trials continue until every broker has
`--min-each` local and remote trials (or `--max-trials`).

Printed per broker: median MB/s local and remote and their ratio, and the median CPU
seconds (user+system of the broker's child processes: the workers and the controller)
per 100 MB, whose ratio remote/local is the forwarding cost with the noise of a shared
machine mostly removed (CPU time, unlike wall time, does not grow when other processes
take the cores).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import uuid
from pathlib import Path

from loadtest.bench.runner import tree_cpu_s
from loadtest.bench_workers import admin_show, front_of, produce
from loadtest.peers import MpbrokerPeer, create_topic, delete_topic, make_workdir

TOPIC = "fwd-bench"


class TreePeer(MpbrokerPeer):
    def __init__(self, workdir, overrides, tree: Path):
        super().__init__(workdir, overrides)
        self.tree = tree

    def env(self) -> dict:
        env = super().env()
        env["PYTHONPATH"] = str(self.tree) + os.pathsep + env.get("PYTHONPATH", "")
        return env


def broker_cpu(peer) -> float:
    """CPU seconds of the broker's processes below its supervisor."""
    return tree_cpu_s(peer.proc.pid, children_only=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--min-each", type=int, default=3)
    ap.add_argument("--max-trials", type=int, default=30)
    ap.add_argument("--tree", action="append", default=[])
    args = ap.parse_args(argv)
    trees = [Path(t).resolve() for t in args.tree] or [Path(__file__).resolve().parent.parent]
    count = int(args.mb * 1e6 / args.size)
    mb = args.size * count / 1e6
    peers = []
    for i, tree in enumerate(trees):
        peers.append(TreePeer(make_workdir(f"fwd{i}"), {"num.workers": 2,
                                                        f"placement.{TOPIC}": 0}, tree))
    for p in peers:
        p.start()
    res = [{0: [], 1: []} for _ in peers]
    try:
        for p in peers:
            create_topic(p.bootstrap, TOPIC, args.partitions)
            owners = {q["partition"]: w["worker"] for w in admin_show(p)["workers"]
                      for q in w["partitions"] if q["topic"] == TOPIC}
            assert set(owners.values()) == {0}, owners
        for trial in range(args.max_trials):
            order = range(len(peers)) if trial % 2 == 0 else reversed(range(len(peers)))
            for i in order:
                peer = peers[i]
                cid = f"fwd-{trial}-{uuid.uuid4().hex[:6]}"
                seen = {}

                def classify():
                    seen["front"] = front_of(peer, cid, "bytes_in")
                    seen["cpu"] = broker_cpu(peer)
                dt = produce(peer.bootstrap, TOPIC, args.partitions, args.size, count, cid,
                             classify)
                cpu = broker_cpu(peer) - seen["cpu"]
                front = seen.get("front")
                if front is None:
                    continue
                res[i][front].append((mb / dt, cpu * 100 / mb))
                print(f"trial {trial + 1} {trees[i]}: worker {front} "
                      f"({'local' if front == 0 else 'remote'}): {mb / dt:7.1f} MB/s, "
                      f"{cpu * 100 / mb:6.3f} CPU s/100MB", flush=True)
            if all(len(r[0]) >= args.min_each and len(r[1]) >= args.min_each for r in res):
                break
        for p in peers:
            delete_topic(p.bootstrap, TOPIC)
    finally:
        for p in peers:
            p.stop()
    print()
    for i, r in enumerate(res):
        if not r[0] or not r[1]:
            print(f"{trees[i]}: not enough trials (local {len(r[0])}, remote {len(r[1])})")
            continue
        ml, mr = (statistics.median(x[0] for x in r[w]) for w in (0, 1))
        cl, cr = (statistics.median(x[1] for x in r[w]) for w in (0, 1))
        print(f"{trees[i]}: local {ml:.1f} MB/s (n={len(r[0])}), remote {mr:.1f} MB/s "
              f"(n={len(r[1])}), throughput remote/local = {mr / ml:.2f}; CPU s/100MB local "
              f"{cl:.3f}, remote {cr:.3f}, CPU remote/local = {cr / cl:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
