"""One measurement: a workload against one broker, with client processes (see clients.py).

A measurement is two phases on a fresh topic, deleted afterwards:

1. live: `producers` processes produce (at max rate, or at a fixed total rate) while
   `consumers` processes tail the topic. Figures: produce throughput (records acked in
   the window), live consume throughput, end-to-end latency p50/p99/p99.9.
2. drain (max-rate workloads only): `consumers` processes read the whole backlog the live
   phase left from the beginning, as fast as they can (OpenMessaging Benchmark's
   "backlog" test). Figure: catch-up consume throughput.

While a phase runs the parent samples CPU time: the broker's process tree (cores used),
the clients' (from the processes themselves) and the whole machine's busy fraction, so
the report can say when the clients, not the broker, were the limit. The live phase's
broker CPU is over the measured window; the drain's over [t0, last record] (the parent
samples the broker's CPU every CPU_SAMPLE_S through the phase and interpolates at the
last record's time; the machine's busy fraction is over the whole phase).

Broker CPU per request and per MB: the clients count the Produce and Fetch requests they
sent (librdkafka's statistics, reqstats.py: the same for every broker). Live phase, where
both run at once: Produce req/s, Fetch req/s, broker CPU µs per request (Produce + Fetch)
and per MB moved (acked produced + consumed in the window). Drain: Fetch req/s, broker
CPU µs per Fetch request and per MB read. None where the broker's process is not known
(a broker somebody else runs) or a client could not count.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import time
import uuid
from dataclasses import dataclass

from loadtest.bench import clients, reqstats
from loadtest.bench.hist import Histogram
from loadtest.peers import create_topic, delete_topic

NS = 1_000_000_000
START_LEAD_S = 0.3             # all processes are ready; they start together this much later
CLIENT_SATURATED = 0.90        # a client process (or its Python thread) used this much of one core: client-bound
MACHINE_SATURATED = 0.90       # all CPUs of the machine busy this fraction: CPU-bound machine
CPU_SAMPLE_S = 0.05            # the broker's CPU sampling period through a phase without a window


@dataclass(frozen=True)
class Workload:
    name: str
    partitions: int
    record_size: int
    fixed_rate: bool          # False: max rate (with a drain phase); True: a fixed rate, latency only
    title: str


@dataclass(frozen=True)
class Setup:
    producers: int
    consumers: int
    warmup_s: float
    duration_s: float
    drain_timeout_s: float
    max_records: int          # per producer process: a count bound on top of the time bound
    producer_config: dict
    consumer_config: dict


# ---------------------------------------------------------------- CPU sampling


def tree_cpu_s(pid: int | None, children_only: bool = False) -> float:
    """CPU seconds (user + system) of a process and its live children (only the
    children with `children_only`); 0 when unknown."""
    return sum(tree_cpu_by_pid(pid, children_only).values())


def tree_cpu_by_pid(pid: int | None, children_only: bool = False) -> dict[int, float]:
    """{pid: CPU seconds} of a process and its live children, as `tree_cpu_s` counts them."""
    if pid is None:
        return {}
    import psutil

    try:
        root = psutil.Process(pid)
        procs = ([] if children_only else [root]) + root.children(recursive=True)
    except psutil.Error:
        return {}
    return _cpu_each(procs)


def _cpu_each(procs: list) -> dict[int, float]:
    import psutil

    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def _cpu_sum(procs: list) -> float:
    return sum(_cpu_each(procs).values())


class TreeCpu:
    """tree_cpu_s of the process tree as it is when made, cheap to read again and again
    (~0.1 ms: no scan of /proc for the children, which takes ~2.5 ms)."""

    def __init__(self, pid: int | None):
        import psutil

        self.procs = []
        if pid is not None:
            try:
                root = psutil.Process(pid)
                self.procs = [root] + root.children(recursive=True)
            except psutil.Error:
                pass

    def seconds(self) -> float:
        return _cpu_sum(self.procs)


def tree_size(pid: int | None) -> int:
    if pid is None:
        return 0
    import psutil

    try:
        return 1 + len(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return 0


class CpuSample:
    def __init__(self, broker_pid: int | None):
        import psutil

        self.t = time.monotonic()
        self.wall_ns = time.time_ns()
        self.per_pid = tree_cpu_by_pid(broker_pid)
        self.broker = sum(self.per_pid.values())
        self.machine = psutil.cpu_times()

    def since(self, earlier: "CpuSample") -> dict:
        wall = max(1e-9, self.t - earlier.t)
        busy = [a - b for a, b in zip(self.machine, earlier.machine)]
        total = sum(busy)
        idle = busy[self.machine._fields.index("idle")] + (
            busy[self.machine._fields.index("iowait")] if "iowait" in self.machine._fields else 0.0)
        # the busiest process of the broker's tree (a worker, usually a front): one at a
        # whole core bounds the broker however many workers idle beside it
        each = sorted(((cpu - earlier.per_pid[pid]) / wall for pid, cpu in self.per_pid.items()
                       if pid in earlier.per_pid), reverse=True)
        return {"broker_cores": (self.broker - earlier.broker) / wall,
                "broker_busiest_process_cores": each[0] if each else float("nan"),
                # every process of the tree, busiest first: an uneven spread of the fronts'
                # connections shows here as a few busy workers beside idle ones
                "broker_process_cores": [round(c, 3) for c in each],
                "machine_busy": 1.0 - idle / total if total > 0 else float("nan")}


# ---------------------------------------------------------------- one phase


def run_phase(targets: list[tuple], broker_pid: int | None, window: tuple[float, float] | None,
              timeout_s: float) -> tuple[list[dict], dict, float]:
    """Start every (target, spec) in its own process, start them together, collect their
    results. -> (results, cpu figures over `window` (offsets from t0, or the whole phase),
    t0 in ns). Without a window the cpu figures also hold "broker_cpu_samples": [(wall
    ns, broker CPU s)] from t0 to the last result, one per CPU_SAMPLE_S."""
    ctx = mp.get_context("spawn")
    shared = clients.Shared(ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0), ctx.Value("i", 0))
    result_q = shared.result_q
    procs = [ctx.Process(target=t, args=(spec, shared), daemon=True) for t, spec in targets]
    for p in procs:
        p.start()
    results: list[dict] = []
    try:
        ready = 0
        deadline = time.monotonic() + clients.READY_TIMEOUT_S
        while ready < len(procs):
            msg = result_q.get(timeout=max(0.1, deadline - time.monotonic()))
            if "ready" in msg:
                ready += 1
            else:  # a process failed before it was ready
                results.append(msg)
                ready += 1
        t0_ns = time.time_ns() + int(START_LEAD_S * NS)
        shared.t0_ns.value = float(t0_ns)
        shared.start_event.set()
        # CPU over [t0 + window[0], t0 + window[1]], or over the whole phase when window is None
        tree = None if window else TreeCpu(broker_pid)
        _sleep_until(t0_ns + int((window[0] if window else 0.0) * NS))
        first = CpuSample(broker_pid)
        samples = [] if window else [(first.wall_ns, tree.seconds())]
        if window:
            _sleep_until(t0_ns + int(window[1] * NS))
            cpu = CpuSample(broker_pid).since(first)
        deadline = time.monotonic() + timeout_s
        while len(results) < len(procs):
            left = deadline - time.monotonic()
            if window:
                results.append(result_q.get(timeout=max(0.1, left)))
                continue
            try:
                results.append(result_q.get(timeout=max(0.001, min(CPU_SAMPLE_S, left))))
            except queue.Empty:
                if left <= 0:
                    raise
            samples.append((time.time_ns(), tree.seconds()))
        if not window:
            cpu = {**CpuSample(broker_pid).since(first), "broker_cpu_samples": samples}
        return results, cpu, t0_ns
    except queue.Empty:
        raise TimeoutError(f"client processes did not report within the phase timeout "
                           f"({len(results)} of {len(procs)} results)") from None
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)


def _sleep_until(ns: int) -> None:
    delay = ns / NS - time.time()
    if delay > 0:
        time.sleep(delay)


# ---------------------------------------------------------------- a measurement


def _cpus() -> int:
    import psutil

    return psutil.cpu_count() or 1


def _errors(results: list[dict]) -> list[str]:
    return [r["error"].splitlines()[0] for r in results if "error" in r]


def _saturated(results: list[dict], role: str) -> float:
    """Highest busy fraction among the `role` processes of the Python thread or of the whole
    process (librdkafka does a connection's work on one thread: one core is its limit too)."""
    fr = [max(r["main_thread_cpu_s"], r["cpu_s"]) / r["wall_s"] for r in results
          if r.get("role") == role and r.get("wall_s")]
    return max(fr, default=0.0)


def measure(peer_name: str, bootstrap: str, broker_pid: int | None, wl: Workload, setup: Setup,
            total_rate: float | None = None) -> dict:
    """Run `wl` once against one broker. `total_rate`: records/s over all producers (fixed-rate
    workloads). Returns the row of figures for the report."""
    topic = f"bench-{wl.name}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, wl.partitions, timeout_s=60.0)
    try:
        row = {"broker": peer_name, "workload": wl.name, "topic": topic}
        row.update(_live(bootstrap, broker_pid, topic, wl, setup, total_rate))
        if not wl.fixed_rate:
            row.update(_drain(bootstrap, broker_pid, topic, wl, setup))
        row["notes"] = _notes(row)
        return row
    finally:
        delete_topic(bootstrap, topic)


def _split(partitions: int, n: int) -> list[list[int]]:
    n = max(1, min(n, partitions))
    return [list(range(partitions))[i::n] for i in range(n)]


def _live(bootstrap, broker_pid, topic, wl: Workload, setup: Setup, total_rate) -> dict:
    common = {"bootstrap": bootstrap, "topic": topic, "record_size": wl.record_size, "warmup_s": setup.warmup_s,
              "duration_s": setup.duration_s, "drain_timeout_s": setup.drain_timeout_s,
              "producers": setup.producers,
              "producer_config": setup.producer_config, "consumer_config": setup.consumer_config}
    rate_each = (total_rate / setup.producers) if total_rate else 0.0
    targets = [(clients.producer, {**common, "rate": rate_each, "max_records": setup.max_records})
               for _ in range(setup.producers)]
    targets += [(clients.consumer, {**common, "partitions": parts, "group": f"bench-{uuid.uuid4().hex[:8]}"})
                for parts in _split(wl.partitions, setup.consumers)]
    window = (setup.warmup_s, setup.warmup_s + setup.duration_s)
    timeout = setup.warmup_s + setup.duration_s + setup.drain_timeout_s + 60
    results, cpu, _ = run_phase(targets, broker_pid, window, timeout)
    prods = [r for r in results if r.get("role") == "producer" and "error" not in r]
    cons = [r for r in results if r.get("role") == "consumer" and "error" not in r]
    hist = Histogram()
    for r in cons:
        hist.merge(Histogram.from_json(r["latency_hist"]))
    acked = sum(r["acked_in_window"] for r in prods)
    d = setup.duration_s
    client_cores = sum(r["cpu_s"] / max(r["wall_s"], 1e-9) for r in prods + cons)
    produce_reqs = reqstats.total([r["reqs"] for r in prods], "Produce")
    fetch_reqs = reqstats.total([r["reqs"] for r in cons], "Fetch")
    broker_cpu_s = cpu["broker_cores"] * d if broker_pid is not None else None
    moved_mb = (acked * wl.record_size + sum(r["window_bytes"] for r in cons)) / 1e6
    return {
        "target_rate_rec_s": total_rate or None,
        "produce_rec_s": acked / d,
        "produce_mb_s": acked * wl.record_size / d / 1e6,
        "consume_live_mb_s": sum(r["window_bytes"] for r in cons) / d / 1e6,
        "p50_ms": hist.percentile_us(50) / 1000, "p99_ms": hist.percentile_us(99) / 1000,
        "p999_ms": hist.percentile_us(99.9) / 1000, "latency_samples": hist.total,
        "latency_hist": hist.to_json(),
        "sent": sum(r["sent"] for r in prods), "received": sum(r["received"] for r in cons),
        "produce_errors": sum(r["errors"] + r["undelivered"] for r in prods),
        "first_produce_error": next((r["first_error"] for r in prods if r["first_error"]), None),
        "consume_errors": sum(r["errors"] for r in cons),
        "client_errors": _errors(results),
        "hit_max_records": any(r["hit_max_records"] for r in prods),
        "broker_cores": cpu["broker_cores"], "machine_busy": cpu["machine_busy"],
        "broker_busiest_process_cores": cpu.get("broker_busiest_process_cores"),
        "broker_process_cores": cpu.get("broker_process_cores"),
        "client_cores": client_cores,
        # CPU the machine spent on anything else (other jobs on a shared machine): background load
        "other_cores": max(0.0, cpu["machine_busy"] * _cpus() - cpu["broker_cores"] - client_cores),
        "producer_core_busy": _saturated(results, "producer"),
        "consumer_core_busy": _saturated(results, "consumer"),
        "produce_req_s": _per_s(produce_reqs, d), "fetch_req_s": _per_s(fetch_reqs, d),
        "broker_us_per_req": reqstats.us_per(
            broker_cpu_s, None if produce_reqs is None or fetch_reqs is None else produce_reqs + fetch_reqs),
        "broker_us_per_mb": reqstats.us_per(broker_cpu_s, moved_mb),
    }


def _per_s(n: float | None, secs: float) -> float | None:
    return None if n is None else n / secs


def _drain(bootstrap, broker_pid, topic, wl: Workload, setup: Setup) -> dict:
    spec = {"bootstrap": bootstrap, "topic": topic, "drain_timeout_s": setup.drain_timeout_s,
            "consumer_config": setup.consumer_config}
    targets = [(clients.drainer, {**spec, "partitions": parts, "group": f"drain-{uuid.uuid4().hex[:8]}"})
               for parts in _split(wl.partitions, setup.consumers)]
    results, cpu, t0_ns = run_phase(targets, broker_pid, None, setup.drain_timeout_s + 60)
    ok = [r for r in results if r.get("role") == "drainer" and "error" not in r]
    t_end = max((r["t_end_ns"] for r in ok), default=t0_ns)
    secs = max(1e-9, (t_end - t0_ns) / NS)
    broker_cpu_s = _cpu_until(cpu["broker_cpu_samples"], t_end)
    fetch_reqs = reqstats.total([r["reqs"] for r in ok], "Fetch")
    known = broker_pid is not None and broker_cpu_s is not None
    return {
        "consume_mb_s": sum(r["received_bytes"] for r in ok) / secs / 1e6,
        "drain_records": sum(r["received"] for r in ok), "drain_s": secs,
        "drain_complete": bool(ok) and all(r["complete"] for r in ok) and len(ok) == len(results),
        "drain_errors": sum(r["errors"] for r in ok), "drain_client_errors": _errors(results),
        "drain_broker_cores": broker_cpu_s / secs if broker_cpu_s is not None else cpu["broker_cores"],
        "drain_machine_busy": cpu["machine_busy"],
        "drainer_core_busy": _saturated(results, "drainer"),
        "drain_fetch_req_s": _per_s(fetch_reqs, secs),
        "drain_us_per_fetch": reqstats.us_per(broker_cpu_s if known else None, fetch_reqs),
        "drain_us_per_mb": reqstats.us_per(broker_cpu_s if known else None,
                                           sum(r["received_bytes"] for r in ok) / 1e6),
    }


def _cpu_until(samples: list[tuple[int, float]], t_end: int) -> float | None:
    """Broker CPU seconds from the first sample (t0) to `t_end`, interpolated between samples."""
    at_end = reqstats.interpolate(samples, t_end)
    return None if at_end is None else at_end - samples[0][1]


def _notes(row: dict) -> list[str]:
    notes = []
    if row["producer_core_busy"] >= CLIENT_SATURATED:
        notes.append(f"client-bound: a producer process used {row['producer_core_busy']:.0%} of a core")
    if row.get("consumer_core_busy", 0) >= CLIENT_SATURATED:
        notes.append(f"client-bound: a live consumer process used {row['consumer_core_busy']:.0%} of a core")
    if row.get("drainer_core_busy", 0) >= CLIENT_SATURATED:
        notes.append(f"client-bound: a catch-up consumer process used {row['drainer_core_busy']:.0%} of a core")
    hot = row.get("broker_busiest_process_cores")
    if hot is not None and hot == hot and hot >= CLIENT_SATURATED:
        notes.append(f"broker process-bound: one broker process used {hot:.0%} of a core")
    busy = max(row["machine_busy"], row.get("drain_machine_busy", 0.0))
    if busy >= MACHINE_SATURATED:
        notes.append(f"machine CPU-bound ({busy:.0%} of all CPUs busy; clients and broker share them)")
    if row["other_cores"] >= 0.25:
        notes.append(f"background load: {row['other_cores']:.2f} cores busy with other processes")
    if row["target_rate_rec_s"] and row["produce_rec_s"] < 0.95 * row["target_rate_rec_s"]:
        notes.append(f"fixed rate not reached ({row['produce_rec_s']:,.0f} of {row['target_rate_rec_s']:,.0f} rec/s)")
    if row["hit_max_records"]:
        notes.append("stopped at the record-count bound")
    if row["produce_errors"] or row["consume_errors"] or row["client_errors"]:
        notes.append(f"errors: produce {row['produce_errors']} ({row['first_produce_error']}), "
                     f"consume {row['consume_errors']}, clients {row['client_errors'][:2]}")
    if "drain_complete" in row and not row["drain_complete"]:
        notes.append(f"drain incomplete {row['drain_client_errors'][:2]}")
    return notes


def median_of(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
    return statistics.median(vals) if vals else float("nan")
