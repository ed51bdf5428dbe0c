"""Topic creation in the embedded controller: linear, and the loop keeps turning.

    .venv/bin/python -m loadtest.bench_topic_creation [--sizes 1200,2400,4800,9600] [--rounds 5]

For each size N (topics of one partition, one request, so N <= 9,999; the broker cap is
raised out of the way):

* `batch`: EmbeddedController.create_topics (model.TopicBatch), median seconds, and the
  ratio to the previous size (about 2.0 when linear);
* `per-topic`: the same topics made with one `model.create_topic` per topic on the
  growing metadata (each copies the topic map: the controller's old loop), for
  comparison; skipped above --per-topic-max;
* `max gap`: the longest time the event loop did not run another task while the batch
  was created (what the controller's heartbeat task would wait), median over rounds,
  and as a share of the whole creation.

Everything runs in this process on a temporary directory (the metadata store writes
and fsyncs as in the broker; nothing is pushed to workers).

    .venv/bin/python -m loadtest.bench_topic_creation --broker [--sizes 500,1000,2000] [--workers 2]

End to end instead: a fresh `mpbroker serve` per size answers one CreateTopics v4 of
one topic with N partitions (the answer comes once the asking worker applied the new
metadata; since the workers open new logs in chunks, loadtest/bench_log_open.py, that
is only the first chunk of its share of the N logs); printed with the time `Log.open` takes
for N logs (each closed at once) in this process on the same disk (the raw cost), and
their ratio.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from mpbroker import config as configmod
from mpbroker.controller.embedded import EmbeddedController
from mpbroker.metadata import model

from loadtest.loop_stall import LoopStall
from loadtest.wire import recv_frame


def controller(tmp: str) -> EmbeddedController:
    ctl = EmbeddedController(configmod.BrokerConfig({
        "broker.id": "1", "log.dirs": tmp, "listeners": "PLAINTEXT://127.0.0.1:0",
        "max.broker.partitions": str(10**7)}))
    ctl.register_broker(1, "127.0.0.1", 9092)
    return ctl


def specs(n: int, prefix: str = "t") -> list[dict]:
    return [{"name": f"{prefix}.{i}", "num_partitions": 1, "replication_factor": 1,
             "assignments": {}, "configs": []} for i in range(n)]


def batch_round(n: int) -> tuple[float, float]:
    """(seconds to create n topics, longest loop gap in seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        ctl = controller(tmp)

        async def main():
            async with LoopStall() as stall:
                start = time.perf_counter()
                res = await ctl.create_topics(specs(n), False, 0)
                took = time.perf_counter() - start
            assert all(r["error_code"] == 0 for r in res)
            return took, stall.longest_s
        return asyncio.run(main())


def per_topic_round(n: int) -> float:
    md = model.register_broker(model.new_cluster_metadata(), model.Broker(1, "127.0.0.1", 9092))
    start = time.perf_counter()
    for s in specs(n):
        md = model.create_topic(md, s["name"], 1, 1)
    return time.perf_counter() - start


def create_topics_v4(bootstrap: str, name: str, partitions: int, timeout_s: float = 300) -> int:
    """One CreateTopics v4 (non-flexible: request header v1); the topic's error code."""
    import socket
    import struct
    from mpbroker.protocol import codec
    body = codec.encode_request(19, 4, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
        "configs": []}], "timeout_ms": int(timeout_s * 1000)})
    cid = b"bench-topic-creation"
    payload = struct.pack(">hhih", 19, 4, 1, len(cid)) + cid + body
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = recv_frame(sock)
    resp = codec.decode_response(19, 4, memoryview(frame), 4)
    return resp["topics"][0]["error_code"]


def raw_log_open_s(n: int) -> float:
    from storage.log import Log, LogConfig
    with tempfile.TemporaryDirectory() as tmp:     # closed at once: this process's fds
        start = time.perf_counter()
        for i in range(n):
            Log.open(f"{tmp}/t-{i}", LogConfig()).close()
        return time.perf_counter() - start


def broker_main(sizes: list[int], workers: int) -> None:
    from loadtest.peers import MpbrokerPeer, make_workdir
    print(f"{'partitions':>10} {'broker answer s':>16} {'raw Log.open s':>15} {'ratio':>7}")
    for n in sizes:
        peer = MpbrokerPeer(make_workdir("topic-creation-"), {"num.workers": workers}).start()
        try:
            start = time.perf_counter()
            code = create_topics_v4(peer.bootstrap, "bench", n)
            took = time.perf_counter() - start
        finally:
            peer.stop()
        raw = raw_log_open_s(n)
        print(f"{n:10d} {took:16.2f} {raw:15.2f} {took / raw:7.2f}" + (f"  error {code}" if code else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-topic-max", type=int, default=9600)
    ap.add_argument("--broker", action="store_true", help="end to end against mpbroker serve")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    if a.broker:
        broker_main([int(x) for x in (a.sizes or "500,1000,2000").split(",")], a.workers)
        return
    sizes = [int(x) for x in (a.sizes or "1200,2400,4800,9600").split(",")]
    print(f"{'topics':>7} {'batch s':>9} {'x prev':>7} {'per-topic s':>12} {'x prev':>7} "
          f"{'max gap ms':>11} {'gap/total':>10}")
    prev_b = prev_p = None
    for n in sizes:
        rounds = [batch_round(n) for _ in range(a.rounds)]
        b = statistics.median(r[0] for r in rounds)
        gap = statistics.median(r[1] for r in rounds)
        p = statistics.median(per_topic_round(n) for _ in range(a.rounds)) \
            if n <= a.per_topic_max else None
        fmt = lambda v, prev: f"{v / prev:7.2f}" if v is not None and prev else f"{'-':>7}"  # noqa: E731
        print(f"{n:7d} {b:9.3f} {fmt(b, prev_b)} "
              f"{(f'{p:12.3f}' if p is not None else f'{chr(45):>12}')} {fmt(p, prev_p)} "
              f"{gap * 1000:11.1f} {gap / b:10.3f}")
        prev_b, prev_p = b, p


if __name__ == "__main__":
    main()
