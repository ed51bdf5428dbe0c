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
            gaps, done = [0.0], [False]

            async def ticker():
                last = time.perf_counter()
                while not done[0]:
                    await asyncio.sleep(0)
                    now = time.perf_counter()
                    gaps[0] = max(gaps[0], now - last)
                    last = now
            t = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            start = time.perf_counter()
            res = await ctl.create_topics(specs(n), False, 0)
            took = time.perf_counter() - start
            done[0] = True
            await t
            assert all(r["error_code"] == 0 for r in res)
            return took, gaps[0]
        return asyncio.run(main())


def per_topic_round(n: int) -> float:
    md = model.register_broker(model.new_cluster_metadata(), model.Broker(1, "127.0.0.1", 9092))
    start = time.perf_counter()
    for s in specs(n):
        md = model.create_topic(md, s["name"], 1, 1)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="1200,2400,4800,9600")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-topic-max", type=int, default=9600)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
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
