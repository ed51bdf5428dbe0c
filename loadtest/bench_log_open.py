"""Opening new partitions on a worker: how long a metadata push that creates N
partitions takes to apply, and how long the worker's event loop stalls meanwhile.

    .venv/bin/python -m loadtest.bench_log_open [--sizes 1000,3000] [--rounds 3] [--fsyncs]

In this process, on a temporary directory (use TMPDIR to pick the disk): a worker's
`Broker` (workers/worker.py) with the metadata of one topic of N single-replica
partitions led by this broker is given the push (`apply_metadata`) on a running loop,
as the worker's controller channel does; a ticker task (what the heartbeat task and
the requests on the loop would wait on) records the longest gap between its turns.
Printed per N (medians over --rounds):

* `apply s`: from the push to the last of the N logs open (served);
* `max stall ms`: the longest time the loop did not run another task;
* `fsyncs/log`: fsync calls (files and directories) per new log (--fsyncs: counted by
  wrapping os.fsync, with the stack that made them).

    .venv/bin/python -m loadtest.bench_log_open --broker [--sizes 1000,3000] [--workers 2]

End to end instead: a fresh `mpbroker serve` per N; 4 connections opened before (the
SO_REUSEPORT group spreads them over the workers) each send ApiVersions one after the
other while one CreateTopics v4 of one topic of N partitions is answered and the
workers create the N partition directories.  Printed: the CreateTopics answer time,
the time until all N directories exist, and the longest ApiVersions round trip in
that window (what a request on an existing connection waited).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import statistics
import tempfile
import time
import traceback

from mpbroker import config as configmod
from mpbroker.metadata import model
from workers.worker import Worker

from loadtest.loop_stall import LoopStall
from loadtest.wire import recv_frame

ME = 1


class Holder:
    def __init__(self, md):
        self.md = md
        self.broker_id = ME

    def metadata(self):
        return self.md

    def broker_config(self):
        return None


def metadata(topics: dict, epoch: int):
    md = model.new_cluster_metadata()
    md = model.register_broker(md, model.Broker(ME, "127.0.0.1", 9092))
    out = {name: model.Topic(name, tid, {p: model.PartitionState(p, ME, 0, (ME,), (ME,), ())
                                         for p in range(n)})
           for name, (tid, n) in topics.items()}
    return model.ClusterMetadata(md.cluster_id, 1, md.brokers, out, epoch)


FSYNCS: collections.Counter = collections.Counter()
APPLY_FSYNCS: collections.Counter = collections.Counter()


def count_fsyncs() -> None:
    real = os.fsync

    def fsync(fd):
        st = traceback.extract_stack(limit=5)[:-1]
        FSYNCS[" <- ".join(f"{os.path.basename(f.filename)}:{f.name}" for f in reversed(st))] += 1
        return real(fd)
    os.fsync = fsync


def one_round(n: int) -> tuple[float, float, int]:
    """(seconds until all n served, longest loop gap in seconds, fsync calls)."""
    with tempfile.TemporaryDirectory(prefix="bench-log-open-") as tmp:
        text = f"broker.id={ME}\nlog.dirs={tmp}\nlisteners=PLAINTEXT://127.0.0.1:0\n"
        cfg = configmod.BrokerConfig.from_text(text, [])
        empty = metadata({}, 1)
        b = Worker(cfg, Holder(empty))

        async def main():
            b.start(asyncio.get_running_loop())
            async with LoopStall() as stall:
                before = sum(FSYNCS.values())
                start = time.perf_counter()
                b.apply_metadata(metadata({"bench": (model.generate_topic_id(), n)}, 2))
                while len(b.partitions) < n:
                    await asyncio.sleep(0.001)
                took = time.perf_counter() - start
                fsyncs = sum(FSYNCS.values()) - before
                APPLY_FSYNCS.update(FSYNCS)     # where, not counting the shutdown's
            b.shutdown()
            return took, stall.longest_s, fsyncs
        return asyncio.run(main())


def api_versions_waits(bootstrap: str, stop, out: list) -> None:
    """ApiVersions v0 on one connection, one after the other, until `stop` is set;
    appends the longest round trip (seconds)."""
    import socket
    import struct
    host, port = bootstrap.rsplit(":", 1)
    cid = b"bench-log-open"
    req = struct.pack(">hhih", 18, 0, 7, len(cid)) + cid
    frame = struct.pack(">i", len(req)) + req
    worst = 0.0
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        while not stop.is_set():
            start = time.perf_counter()
            sock.sendall(frame)
            recv_frame(sock)
            worst = max(worst, time.perf_counter() - start)
    out.append(worst)


def broker_main(sizes: list[int], workers: int) -> None:
    import threading
    from loadtest.bench_topic_creation import create_topics_v4
    from loadtest.peers import MpbrokerPeer, make_workdir
    print(f"{'partitions':>10} {'answer s':>9} {'all dirs s':>11} {'max ApiVersions wait ms':>24}")
    for n in sizes:
        peer = MpbrokerPeer(make_workdir("log-open-"), {"num.workers": workers}).start()
        data = peer.workdir / "data"
        try:
            stop, worst = threading.Event(), []
            pollers = [threading.Thread(target=api_versions_waits, args=(peer.bootstrap, stop, worst))
                       for _ in range(4)]
            for t in pollers:
                t.start()
            start = time.perf_counter()
            code = create_topics_v4(peer.bootstrap, "bench", n)
            answered = time.perf_counter() - start
            deadline = time.monotonic() + 600
            while sum(1 for d in os.listdir(data) if d.startswith("bench-")) < n:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            all_dirs = time.perf_counter() - start
            stop.set()
            for t in pollers:
                t.join()
        finally:
            peer.stop()
            shutil.rmtree(peer.workdir, ignore_errors=True)
        print(f"{n:10d} {answered:9.2f} {all_dirs:11.2f} {max(worst) * 1000:24.1f}"
              + (f"  error {code}" if code else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="1000,3000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fsyncs", action="store_true", help="print where the fsyncs are")
    ap.add_argument("--broker", action="store_true", help="end to end against mpbroker serve")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    if a.broker:
        broker_main([int(x) for x in a.sizes.split(",")], a.workers)
        return
    count_fsyncs()
    print(f"{'partitions':>10} {'apply s':>9} {'ms/log':>7} {'max stall ms':>13} {'fsyncs/log':>11}")
    for n in (int(x) for x in a.sizes.split(",")):
        APPLY_FSYNCS.clear()
        rounds = []
        for _ in range(a.rounds):
            FSYNCS.clear()
            rounds.append(one_round(n))
        took = statistics.median(r[0] for r in rounds)
        gap = statistics.median(r[1] for r in rounds)
        fs = statistics.median(r[2] for r in rounds) / n
        print(f"{n:10d} {took:9.2f} {took / n * 1000:7.2f} {gap * 1000:13.1f} {fs:11.2f}")
        if a.fsyncs:
            for where, k in APPLY_FSYNCS.most_common():
                print(f"    {k / n / a.rounds:5.2f}/log  {where}")


if __name__ == "__main__":
    main()
