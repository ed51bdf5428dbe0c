"""Memory of a worker per idle connection and per incremental fetch session (issue #15).

    .venv/bin/python -m loadtest.bench_memory [--rounds 3] [--connections 1000]
                                             [--sessions 8] [--partitions 20000]
                                             [--produce-mb 0] [--compare COMMIT]

Each round starts a fresh broker with `num.workers=1` (so one worker holds everything)
and reads that worker's RSS (/proc/<pid>/status VmRSS; the pid from its "serving" log
line):

* idle connections: `--connections` raw TCP connections, each answered one ApiVersions
  and then left open; (RSS with them open - RSS before) / connections.
* fetch sessions: `--sessions` full Fetch v12 requests (session epoch 0, one connection),
  each naming `--partitions` partitions of one topic (partitions that need not exist:
  the session caches what was asked), so the worker holds that many sessions;
  (RSS after - RSS before) / (sessions x partitions), printed per partition and per
  100k-partition session. The sessions must fit `max.incremental.fetch.session.cache.
  bytes` (the run sets it to 1 GiB) and slots; the number actually created is printed.

`--produce-mb N` (0: off) also times what the new read path (a readiness wait, then
`recv_into` the worker's shared buffer, charged to the memory pool) costs: N MB of
1 KiB records produced with confluent-kafka to a fresh 4-partition topic (bench_workers'
producer: acks=1, linger.ms=5), MB/s.

`--compare COMMIT` runs the same rounds, interleaved (A B, B A, ...), against the broker of another
commit of this repository (`git archive` into a temporary directory, run with that
tree on PYTHONPATH), and prints the ratios now/then of the medians.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from loadtest.bench_workers import produce
from loadtest.peers import REPO_ROOT, MpbrokerPeer, create_topic, make_workdir
from loadtest.wire import recv_frame
from mpbroker.protocol import codec, framing

FETCH, API_VERSIONS = 1, 18


class TreePeer(MpbrokerPeer):
    """mpbroker run from another source tree (for --compare)."""

    def __init__(self, workdir: Path, tree: Path, overrides: dict):
        super().__init__(workdir, overrides)
        self.tree = tree

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.tree)
        return env


def export_tree(commit: str) -> Path:
    out = Path(tempfile.mkdtemp(prefix="mpbroker-tree-"))
    data = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", commit],
                          check=True, capture_output=True).stdout
    tar = out / "tree.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(out, filter="data")
    tar.unlink()
    return out


def worker_pid(peer: MpbrokerPeer, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"worker 0 \(pid (\d+)\) serving", peer.log_tail(1 << 20))
        if m:
            return int(m.group(1))
        time.sleep(0.1)
    raise RuntimeError(f"no worker serving; log:\n{peer.log_tail()}")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def call(s: socket.socket, api_key: int, version: int, cid: int, body: dict) -> bytes:
    s.sendall(framing.frame_request(api_key, version, cid, "bench-memory", body))
    return recv_frame(s)


def settle(pid: int) -> int:
    """RSS once it stops moving (the loop has finished what it was doing)."""
    last = rss(pid)
    for _ in range(20):
        time.sleep(0.2)
        now = rss(pid)
        if abs(now - last) < 64 * 1024:
            return now
        last = now
    return last


def idle_connections(peer: MpbrokerPeer, pid: int, n: int) -> float:
    host, port = peer.bootstrap.rsplit(":", 1)
    before = settle(pid)
    conns = []
    try:
        for i in range(n):
            s = socket.create_connection((host, int(port)), timeout=30)
            call(s, API_VERSIONS, 0, i, {})
            conns.append(s)
        after = settle(pid)
    finally:
        for s in conns:
            s.close()
    return (after - before) / n


def fetch_sessions(peer: MpbrokerPeer, pid: int, sessions: int, partitions: int) -> tuple[float, int]:
    topic = "bench-memory-sessions"
    create_topic(peer.bootstrap, topic, 1)
    host, port = peer.bootstrap.rsplit(":", 1)
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": 0,
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1024,
                 "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}
                for p in range(partitions)]}],
            "forgotten_topics_data": [], "rack_id": ""}
    with socket.create_connection((host, int(port)), timeout=60) as s:
        call(s, FETCH, 12, 0, dict(body, topics=[{"topic": topic, "partitions": body["topics"][0]["partitions"][:1]}],
                                   session_epoch=-1))   # warm the fetch path, no session
        before = settle(pid)
        created = 0
        for i in range(sessions):
            resp = call(s, FETCH, 12, 1 + i, body)
            _, pos = framing.parse_response_header(resp, FETCH, 12)
            if codec.decode_response(FETCH, 12, resp, pos)["session_id"]:
                created += 1
        after = settle(pid)
    return (after - before) / max(1, created * partitions), created


def r_id() -> str:
    return uuid.uuid4().hex[:8]


def one_round(tree: Path | None, args) -> dict:
    overrides = {"num.workers": 1, "max.incremental.fetch.session.cache.bytes": 1 << 30}
    workdir = make_workdir("bench-memory-")
    peer = TreePeer(workdir, tree, overrides) if tree else MpbrokerPeer(workdir, overrides)
    peer.start()
    try:
        pid = worker_pid(peer)
        conn = idle_connections(peer, pid, args.connections)
        part, created = fetch_sessions(peer, pid, args.sessions, args.partitions)
        res = {"conn": conn, "part": part, "created": created, "mb_s": 0.0}
        if args.produce_mb:
            topic = f"bench-memory-produce-{r_id()}"
            create_topic(peer.bootstrap, topic, 4)
            count = args.produce_mb * 1024
            res["mb_s"] = count * 1024 / 1e6 / produce(peer.bootstrap, topic, 4, 1024, count)
        return res
    finally:
        peer.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=20000)
    ap.add_argument("--produce-mb", type=int, default=0)
    ap.add_argument("--compare", metavar="COMMIT", help="also run the broker of this commit")
    args = ap.parse_args(argv)
    trees = {"now": None}
    if args.compare:
        trees[args.compare] = export_tree(args.compare)
    results: dict[str, list[dict]] = {k: [] for k in trees}
    for r in range(args.rounds):
        order = list(trees.items())
        for name, tree in (order if r % 2 == 0 else order[::-1]):    # A B, B A, ...
            res = one_round(tree, args)
            results[name].append(res)
            print(f"round {r + 1} {name}: {res['conn'] / 1024:.1f} KiB per idle connection, "
                  f"{res['part']:.0f} B per session partition "
                  f"({res['part'] * 100000 / 2**20:.1f} MiB per 100k-partition session), "
                  f"{res['created']}/{args.sessions} sessions created"
                  + (f", produce {res['mb_s']:.0f} MB/s" if args.produce_mb else ""), flush=True)
    med = {}
    for name, rows in results.items():
        med[name] = (statistics.median(x["conn"] for x in rows),
                     statistics.median(x["part"] for x in rows),
                     statistics.median(x["mb_s"] for x in rows))
        print(f"median {name}: {med[name][0] / 1024:.1f} KiB per idle connection, "
              f"{med[name][1]:.0f} B per session partition "
              f"({med[name][1] * 100000 / 2**20:.1f} MiB per 100k-partition session)"
              + (f", produce {med[name][2]:.0f} MB/s" if args.produce_mb else ""))
    if args.compare:
        now, then = med["now"], med[args.compare]
        print(f"ratio now/{args.compare}: idle connection {now[0] / then[0]:.2f}x, "
              f"session partition {now[1] / then[1]:.2f}x"
              + (f", produce {now[2] / then[2]:.2f}x" if args.produce_mb else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
