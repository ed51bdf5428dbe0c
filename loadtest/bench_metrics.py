"""What metrics cost: produce/consume throughput of mpbroker with and without
`metrics.listener`, and the per-request cost of the hot-path hook in isolation.

    .venv/bin/python -m loadtest.bench_metrics [--rounds 3] [--mb 32] [--sizes 100,1024]
                                               [--acks 1] [--scrape-s 1] [--calls 200000]
                                               [--workers 1]

1. Micro: `MeteredDispatcher.dispatch` (workers/metrics.py) around a dispatcher that
   answers at once, against that dispatcher called bare; `--calls` calls each, five
   alternating repeats, the median ns per call and the difference: what each request
   pays for its timing and histogram updates.
2. Clients: two brokers side by side on 127.0.0.1 (`--workers` workers each), one with `metrics.listener` (scraped
   every `--scrape-s` seconds by a thread of this process while it is measured, as a
   Prometheus would, far more often than its usual 15 s) and one without. For each
   record size and acks setting, loadtest.bench_clients' measurement (one producer, then
   one consumer, `--mb` MB through a fresh 1-partition topic). Rounds alternate A B A B.
   Printed: every round, the medians and the ratio with/without, and the hook's cost
   as a share of the metered broker's own mean Produce request time (from its /metrics).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import urllib.request

from loadtest.bench_clients import measure
from loadtest.peers import MpbrokerPeer, free_port, make_workdir


def micro(calls: int, repeats: int = 5) -> tuple[float, float]:
    """(bare ns per call, metered ns per call), medians over `repeats`."""
    from types import SimpleNamespace

    from workers import metrics

    class Answering:
        def dispatch(self, ctx, frame, pos):
            return [b""]

    bare = Answering()
    metered = metrics.MeteredDispatcher(Answering(), metrics.WorkerMetrics(0), log_requests=False)
    conn = SimpleNamespace(client_id="c", metered=True, read_at=time.perf_counter())
    ctx = SimpleNamespace(api_key=0, api_version=9, correlation_id=1, client_id="c",
                          client_host="127.0.0.1", connection=conn)
    frame = memoryview(b"")
    out = {"bare": [], "metered": []}
    for _ in range(repeats):
        for name, d in (("bare", bare), ("metered", metered)):
            fn = d.dispatch
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(ctx, frame, 0)
            out[name].append((time.perf_counter() - t0) / calls * 1e9)
    return statistics.median(out["bare"]), statistics.median(out["metered"])


class Scraper(threading.Thread):
    def __init__(self, port: int, every_s: float):
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every_s = every_s
        self.active = threading.Event()
        self.stop = threading.Event()
        self.scrapes = 0
        self.failures = 0

    def run(self) -> None:
        while not self.stop.is_set():
            if self.active.is_set():
                try:
                    with urllib.request.urlopen(self.url, timeout=10) as r:
                        r.read()
                    self.scrapes += 1
                except OSError:
                    self.failures += 1
            self.stop.wait(self.every_s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=float, default=32.0)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--acks", default="1")
    ap.add_argument("--scrape-s", type=float, default=1.0)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=1,
                    help="num.workers of both brokers (default 1: no cross-worker routing, "
                         "whose luck of the draw would hide what is measured here)")
    args = ap.parse_args(argv)

    bare_ns, metered_ns = micro(args.calls)
    print(f"# hot path: bare dispatch {bare_ns:.0f} ns, metered {metered_ns:.0f} ns: "
          f"+{metered_ns - bare_ns:.0f} ns per request")

    port = free_port()
    common = {"num.workers": args.workers}
    peers = {"off": MpbrokerPeer(make_workdir("bench-metrics-off-"), dict(common)),
             "on": MpbrokerPeer(make_workdir("bench-metrics-on-"),
                                {**common, "metrics.listener": f"http://127.0.0.1:{port}"})}
    for name, peer in peers.items():
        peer.start()
        print(f"# metrics {name}: {peer.describe()} at {peer.bootstrap}")
    scraper = Scraper(port, args.scrape_s)
    scraper.start()
    sizes = [int(s) for s in args.sizes.split(",")]
    acks_list = args.acks.split(",")
    results: dict[tuple, list] = {}
    print(f"{'round':>5} {'metrics':>7} {'size':>6} {'acks':>4} {'produce MB/s':>13} {'consume MB/s':>13}")
    try:
        for r in range(1, args.rounds + 1):
            for name, peer in peers.items():
                for size in sizes:
                    for acks in acks_list:
                        if name == "on":
                            scraper.active.set()
                        try:
                            pr, co = measure(peer, size, acks, args.mb)
                        except Exception as e:  # noqa: BLE001 - reported, the run goes on
                            print(f"{r:>5} {name:>7} {size:>6} {acks:>4} failed: {e}")
                            continue
                        finally:
                            scraper.active.clear()
                        results.setdefault((name, size, acks), []).append((pr, co))
                        print(f"{r:>5} {name:>7} {size:>6} {acks:>4} {pr:>13.1f} {co:>13.1f}",
                              flush=True)
        produce_ms = mean_request_ms(port, "Produce")
    finally:
        scraper.stop.set()
        for p in peers.values():
            p.stop()
    print(f"\n# medians over rounds ({scraper.scrapes} scrapes, {scraper.failures} failed)")
    print(f"{'size':>6} {'acks':>4} {'off prod':>9} {'on prod':>9} {'off cons':>9} "
          f"{'on cons':>9}  ratio prod  ratio cons (on/off)")
    for size in sizes:
        for acks in acks_list:
            med = {}
            for n in peers:
                rows = results.get((n, size, acks), [])
                med[n] = ((statistics.median(x for x, _ in rows),
                           statistics.median(y for _, y in rows)) if rows
                          else (float("nan"), float("nan")))
            print(f"{size:>6} {acks:>4} {med['off'][0]:>9.1f} {med['on'][0]:>9.1f} "
                  f"{med['off'][1]:>9.1f} {med['on'][1]:>9.1f}  "
                  f"{med['on'][0] / med['off'][0]:>10.2f}  {med['on'][1] / med['off'][1]:>10.2f}")
    hook_ms = (metered_ns - bare_ns) / 1e6
    print(f"# mean Produce request time on the metered broker: {produce_ms:.3f} ms; the hook "
          f"adds {hook_ms * 1e3:.2f} us = {hook_ms / produce_ms:.2%} of it")
    return 0


def mean_request_ms(port: int, api: str) -> float:
    """The metered broker's own figure: total time / count of `api` requests."""
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    got = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.labels.get("request") == api and s.name.startswith(
                    "kafka_network_requestmetrics_totaltimems_"):
                got[s.name.rsplit("_", 1)[1]] = s.value
    return got["sum"] / got["count"]


if __name__ == "__main__":
    sys.exit(main())
