"""The benchmark's results: medians, ratios, goals, a markdown report and PNG plots.

Input is the run's dict (cli.py builds it, results.json is it):
  {"machine": {...}, "limits": {...}, "peers": {name: description}, "rows": [row, ...],
   "scaling": [row, ...], "config": {...}, "command": "..."}
where a row is runner.measure()'s dict plus "round". Pure functions except `write_plots`.
METRICS are the main tables' columns; COST_METRICS those of the broker CPU cost tables
(per request and per MB, from the clients' request counts: runner.py, reqstats.py).
"""

from __future__ import annotations

import math

from loadtest.bench.hist import Histogram
from loadtest.bench.runner import median_of

REFERENCE = "mpbroker"
METRICS = [  # (key, column title, format)
    ("produce_mb_s", "produce MB/s", "{:,.1f}"),
    ("produce_rec_s", "produce rec/s", "{:,.0f}"),
    ("consume_mb_s", "consume (catch-up) MB/s", "{:,.1f}"),
    ("consume_live_mb_s", "consume (live) MB/s", "{:,.1f}"),
    ("p50_ms", "e2e p50 ms", "{:,.2f}"),
    ("p99_ms", "e2e p99 ms", "{:,.2f}"),
    ("p999_ms", "e2e p99.9 ms", "{:,.2f}"),
    ("broker_cores", "broker CPU cores", "{:.2f}"),
    ("client_cores", "client CPU cores", "{:.2f}"),
    ("other_cores", "other CPU cores", "{:.2f}"),
]
COST_METRICS = [  # live phase: Produce and Fetch at once; catch-up: Fetch alone
    ("produce_req_s", "Produce req/s", "{:,.0f}"),
    ("fetch_req_s", "Fetch req/s", "{:,.0f}"),
    ("broker_us_per_req", "broker CPU µs / request", "{:,.1f}"),
    ("broker_us_per_mb", "broker CPU µs / MB", "{:,.0f}"),
    ("drain_fetch_req_s", "catch-up Fetch req/s", "{:,.0f}"),
    ("drain_us_per_fetch", "catch-up broker CPU µs / Fetch", "{:,.1f}"),
    ("drain_us_per_mb", "catch-up broker CPU µs / MB", "{:,.0f}"),
]
HIGHER_IS_BETTER = {"produce_mb_s", "produce_rec_s", "consume_mb_s", "consume_live_mb_s"}


def fmt(value, spec: str = "{:,.1f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return spec.format(value)


def medians(run: dict) -> dict[tuple[str, str], dict[str, float]]:
    """{(workload, broker): {metric: median over rounds}}"""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in run["rows"]:
        out.setdefault((r["workload"], r["broker"]), {})
    for (wl, broker) in out:
        rows = [r for r in run["rows"] if r["workload"] == wl and r["broker"] == broker]
        out[(wl, broker)] = {k: median_of(rows, k) for k, _, _ in METRICS + COST_METRICS}
    return out


def merged_latency(run: dict, workload: str, broker: str) -> Histogram:
    h = Histogram()
    for r in run["rows"]:
        if r["workload"] == workload and r["broker"] == broker:
            h.merge(Histogram.from_json(r.get("latency_hist", {})))
    return h


def goals(run: dict) -> list[dict]:
    """The issue's goals, each with its figure and whether it is met (None: not measured)."""
    med = medians(run)
    out = []
    others = [p for p in run["peers"] if p != REFERENCE]
    max_wls = [w["name"] for w in run["workloads"] if not w["fixed_rate"]]
    lat_wls = [w["name"] for w in run["workloads"] if w["fixed_rate"]]
    for other in others:
        for wl in max_wls:
            for key, what in (("produce_mb_s", "produce"), ("consume_mb_s", "consume (catch-up)")):
                a, b = med.get((wl, REFERENCE), {}).get(key), med.get((wl, other), {}).get(key)
                ratio = a / b if a and b and a == a and b == b else float("nan")
                out.append({"goal": f"{what} throughput above {other}'s ({wl})",
                            "figure": f"{fmt(a)} vs {fmt(b)} MB/s, ratio {fmt(ratio, '{:.2f}')}",
                            "met": None if ratio != ratio else ratio > 1.0})
    loop = run["limits"].get("loopback_tcp_mb_s")
    for wl in max_wls:
        c = med.get((wl, REFERENCE), {}).get("consume_mb_s")
        frac = c / loop if c and loop and c == c else float("nan")
        out.append({"goal": f"consume within 0.5x of the loopback limit ({wl})",
                    "figure": f"{fmt(c)} of {fmt(loop, '{:,.0f}')} MB/s = {fmt(frac, '{:.2f}')}x",
                    "met": None if frac != frac else frac >= 0.5})
    for wl in lat_wls:
        p99 = med.get((wl, REFERENCE), {}).get("p99_ms")
        rate = run.get("fixed_rate_rec_s")
        out.append({"goal": f"p99 end-to-end latency under 10 ms at half the max rate ({wl})",
                    "figure": f"p99 {fmt(p99, '{:.2f}')} ms at {fmt(rate, '{:,.0f}')} rec/s",
                    "met": None if p99 is None or p99 != p99 else p99 < 10.0})
    g = scaling_goal(run.get("scaling", []))
    if g:
        out.append(g)
    return out


SCALING_GOAL, SCALING_GOAL_UP_TO = 0.8, 8


def scaling_efficiency(scaling: list[dict]) -> list[dict]:
    """Per scaling row and direction (produce, catch-up consume): the speed-up over the
    smallest worker count measured, the efficiency (speed-up per worker added in
    proportion: 1.0 is linear) and the marginal efficiency (what the workers added since
    the previous row brought, in units of one worker of the smallest row)."""
    rows = sorted((r for r in scaling if r.get("produce_mb_s") and r["produce_mb_s"] == r["produce_mb_s"]),
                  key=lambda r: r["num_workers"])
    out = []
    if not rows:
        return out
    base = rows[0]
    prev = None
    for r in rows:
        e = {"num_workers": r["num_workers"]}
        for key, short in (("produce_mb_s", "produce"), ("consume_mb_s", "consume")):
            b, v = base.get(key), r.get(key)
            if not b or v is None or v != v:
                continue
            per_worker = b / base["num_workers"]
            e[f"{short}_speedup"] = v / b
            e[f"{short}_efficiency"] = v / (per_worker * r["num_workers"])
            if prev is not None and prev.get(key) is not None and r["num_workers"] > prev["num_workers"]:
                e[f"{short}_marginal"] = (v - prev[key]) / (per_worker * (r["num_workers"] - prev["num_workers"]))
        # CPU per MB produced, the base row's over this row's: the figure that scales when
        # the machine (clients and broker on the same cores), not the broker, bounds MB/s
        if base.get("broker_cores") and r.get("broker_cores"):
            e["cpu_efficiency"] = (base["broker_cores"] / base["produce_mb_s"]) / (
                r["broker_cores"] / r["produce_mb_s"])
        out.append(e)
        prev = r
    return out


def scaling_goal(scaling: list[dict]) -> dict | None:
    """The issue's goal over the rows up to SCALING_GOAL_UP_TO workers: efficiency at least
    SCALING_GOAL for produce and catch-up consume (None when fewer than two rows ran)."""
    eff = [e for e in scaling_efficiency(scaling) if e["num_workers"] <= SCALING_GOAL_UP_TO]
    if len(eff) < 2:
        return None
    worst = {d: min((e[f"{d}_efficiency"] for e in eff if f"{d}_efficiency" in e), default=float("nan"))
             for d in ("produce", "consume")}
    # None (not measured) when a direction has no figure
    met = None if any(v != v for v in worst.values()) else all(v >= SCALING_GOAL for v in worst.values())
    return {"goal": f"per-worker scaling efficiency at least {SCALING_GOAL} up to {SCALING_GOAL_UP_TO} workers",
            "figure": f"lowest: produce {fmt(worst['produce'], '{:.2f}')}, consume {fmt(worst['consume'], '{:.2f}')} "
                      f"(workers {', '.join(str(e['num_workers']) for e in eff)})",
            "met": met}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _round_table(run: dict) -> list[str]:
    header = ["workload", "round", "broker"] + [t for _, t, _ in METRICS] + ["notes"]
    rows = [[r["workload"], str(r["round"]), r["broker"]] + [fmt(r.get(k), f) for k, _, f in METRICS]
            + ["; ".join(r.get("notes", [])) or ""] for r in run["rows"]]
    return _table(header, rows)


def _cost_round_table(run: dict) -> list[str]:
    """COST_METRICS per round, grouped by workload and broker (so that each one's spread over
    rounds reads at a glance)."""
    wls, peers = [w["name"] for w in run["workloads"]], list(run["peers"])
    order = sorted(run["rows"], key=lambda r: (wls.index(r["workload"]) if r["workload"] in wls else len(wls),
                                               peers.index(r["broker"]) if r["broker"] in peers else len(peers),
                                               r["round"]))
    return _table(["workload", "broker", "round"] + [t for _, t, _ in COST_METRICS],
                  [[r["workload"], r["broker"], str(r["round"])] + [fmt(r.get(k), f) for k, _, f in COST_METRICS]
                   for r in order])


def _median_table(run: dict, metrics: list) -> list[str]:
    """Medians per workload and metric (a metric no broker has for a workload is left out),
    and the ratio mpbroker / peer."""
    med = medians(run)
    peers = list(run["peers"])
    header = ["workload", "metric"] + peers + [f"ratio vs {p}" for p in peers if p != REFERENCE]
    rows = []
    for w in run["workloads"]:
        for k, title, f in metrics:
            vals = [med.get((w["name"], p), {}).get(k) for p in peers]
            if all(v is None or v != v for v in vals):
                continue
            ref = med.get((w["name"], REFERENCE), {}).get(k)
            ratios = [fmt(ref / v if ref and v and v == v else float("nan"), "{:.2f}")
                      for p, v in zip(peers, vals) if p != REFERENCE]
            rows.append([w["name"], title] + [fmt(v, f) for v in vals] + ratios)
    return _table(header, rows)


def markdown(run: dict) -> str:
    m, lim, cfg = run["machine"], run["limits"], run["config"]
    lines = [f"Command: `{run['command']}`", "",
             f"Machine: {m['cpu_model']}, {m['cpus_usable']} usable CPUs of {m['cpus']}, {m['memory_gib']} GiB RAM, "
             f"{m['os']}, Python {m['python']}. Brokers and client processes share this machine (loopback only).", ""]
    lines += ["Brokers:", ""] + [f"* `{n}`: {d}" for n, d in run["peers"].items()] + [""]
    lines += [f"Clients: {cfg['producers']} producer and {cfg['consumers']} consumer processes (confluent-kafka), "
              f"acks={cfg['producer_config'].get('acks', 'all')}, "
              f"linger.ms={cfg['producer_config'].get('linger.ms', 1):g}, batch.size=1 MiB, no compression; "
              f"warm-up {cfg['warmup_s']} s, measured {cfg['duration_s']} s per round; {cfg['rounds']} rounds "
              f"alternating the brokers.", ""]
    lines += ["Machine limits, measured in this run:", ""]
    lines += _table(["loopback TCP (1 connection)", "disk write, no fsync", "disk write, fsync per 1 MiB"],
                    [[f"{fmt(lim['loopback_tcp_mb_s'], '{:,.0f}')} MB/s", f"{fmt(lim['disk_write_mb_s'], '{:,.0f}')} MB/s",
                      f"{fmt(lim['disk_write_fsync_mb_s'], '{:,.0f}')} MB/s"]]) + [""]
    lines += ["Workloads (after the OpenMessaging Benchmark):", ""]
    lines += [f"* `{w['name']}`: {w['title']}" for w in run["workloads"]] + [""]
    if run["rows"]:  # none in a scaling run alone (--workloads "")
        lines += ["Per round:", ""]
        lines += _round_table(run) + [""]
        lines += ["Medians over rounds (ratio = mpbroker / peer; for latency and CPU lower is better):", ""]
        lines += _median_table(run, METRICS) + [""]
        lines += ["Broker CPU per request and per MB. Requests are counted by the clients (librdkafka's "
                  "statistics), the same way for every broker. Live: the measured window, Produce and Fetch "
                  "requests together (both run at once), MB produced + consumed; catch-up: the backlog read, "
                  "Fetch alone, MB read. Per broker and round:", ""]
        lines += _cost_round_table(run) + [""]
        lines += ["Medians over rounds (ratio = mpbroker / peer; for µs lower is better):", ""]
        lines += _median_table(run, COST_METRICS) + [""]
    lines += ["Goals:", ""]
    lines += _table(["goal", "figure", "met"],
                    [[g["goal"], g["figure"], {True: "yes", False: "**no**", None: "-"}[g["met"]]]
                     for g in goals(run)]) + [""]
    if run.get("scaling"):
        lines += ["Per-worker scaling (mpbroker, `--override num.workers=N`, workload "
                  f"`{run['scaling_workload']}`):", ""]
        lines += _table(["num.workers", "broker processes (whole tree)", "produce MB/s", "consume (catch-up) MB/s",
                         "broker CPU cores", "busiest broker process (cores)", "each broker process (cores, last round)",
                         "client CPU cores", "machine busy", "notes"],
                        [[str(r["num_workers"]), str(r["broker_processes"]), fmt(r.get("produce_mb_s")),
                          fmt(r.get("consume_mb_s")), fmt(r.get("broker_cores"), "{:.2f}"),
                          fmt(r.get("broker_busiest_process_cores"), "{:.2f}"),
                          " ".join(f"{c:.2f}" for c in r.get("broker_process_cores") or []) or "-",
                          fmt(r.get("client_cores"), "{:.2f}"), fmt(r.get("machine_busy"), "{:.0%}"),
                          "; ".join(r.get("notes", []))] for r in run["scaling"]]) + [""]
        eff = scaling_efficiency(run["scaling"])
        if len(eff) > 1:
            lines += [f"Scaling efficiency over num.workers={eff[0]['num_workers']} (1.00 = linear; marginal: what "
                      "the workers added since the row before brought, per worker of the first row; CPU: the "
                      "broker's CPU per MB produced in the first row over this row's):", ""]
            lines += _table(["num.workers", "produce speed-up", "produce efficiency", "produce marginal",
                             "consume speed-up", "consume efficiency", "consume marginal", "CPU efficiency"],
                            [[str(e["num_workers"])] + [fmt(e.get(f"{d}_{k}"), "{:.2f}")
                                                        for d in ("produce", "consume")
                                                        for k in ("speedup", "efficiency", "marginal")]
                             + [fmt(e.get("cpu_efficiency"), "{:.2f}")]
                             for e in eff]) + [""]
    notes = [f"* {n}" for n in run.get("notes", [])]
    if notes:
        lines += ["Notes:", ""] + notes + [""]
    return "\n".join(lines)


def write_plots(run: dict, out_dir) -> list[str]:
    """throughput.png (bars), cost.png (broker CPU per request and per MB, bars),
    latency_cdf.png, scaling.png (when there is a scaling run).
    Needs matplotlib; returns the files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    med, peers = medians(run), list(run["peers"])
    groups = [(w["name"], k, t) for w in run["workloads"] if not w["fixed_rate"]
              for k, t in (("produce_mb_s", "produce"), ("consume_mb_s", "consume"))]
    if groups:
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4))
        _grouped_bars(ax, med, peers, groups)
        loop = run["limits"].get("loopback_tcp_mb_s")
        if loop:
            ax.axhline(loop, color="grey", linestyle="--", linewidth=1, label=f"loopback TCP {loop:,.0f} MB/s")
        ax.set_ylabel("MB/s (median over rounds)")
        ax.set_title("Throughput")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "throughput.png", dpi=110)
        plt.close(fig)
        written.append("throughput.png")
    written += _cost_plot(run, med, peers, out_dir, plt)
    lat_wls = [w["name"] for w in run["workloads"] if w["fixed_rate"]] or [w["name"] for w in run["workloads"]]
    if run["rows"]:     # none in a scaling run alone
        fig, ax = plt.subplots(figsize=(7, 4))
        for wl in lat_wls:
            for p in peers:
                cdf = merged_latency(run, wl, p).cdf()
                if cdf:
                    ax.plot([x / 1000 for x, _ in cdf], [y for _, y in cdf], label=f"{p} ({wl})")
        ax.axvline(10.0, color="grey", linestyle="--", linewidth=1, label="10 ms (the p99 goal)")
        ax.set_xscale("log")
        ax.set_xlabel("end-to-end latency, ms (log)")
        ax.set_ylabel("fraction of records")
        ax.set_title(f"End-to-end latency CDF at {fmt(run.get('fixed_rate_rec_s'), '{:,.0f}')} rec/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "latency_cdf.png", dpi=110)
        plt.close(fig)
        written.append("latency_cdf.png")
    if run.get("scaling"):
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [r["num_workers"] for r in run["scaling"]]
        for k, t in (("produce_mb_s", "produce"), ("consume_mb_s", "consume (catch-up)")):
            ax.plot(xs, [r.get(k, float("nan")) for r in run["scaling"]], marker="o", label=t)
        ax.set_xlabel("num.workers")
        ax.set_ylabel("MB/s")
        ax.set_xticks(xs)
        ax.set_title(f"mpbroker per-worker scaling ({run['scaling_workload']})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "scaling.png", dpi=110)
        plt.close(fig)
        written.append("scaling.png")
    return written


def _grouped_bars(ax, med: dict, peers: list[str], groups: list[tuple[str, str, str]]) -> None:
    """One bar per peer for each (workload, metric key, label) group, labelled with its value."""
    width = 0.8 / max(1, len(peers))
    for i, p in enumerate(peers):
        vals = [med.get((wl, p), {}).get(k, float("nan")) for wl, k, _ in groups]
        bars = ax.bar([g + i * width for g in range(len(groups))], [0 if v != v else v for v in vals], width,
                      label=p)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks([g + width * (len(peers) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{wl}\n{t}" for wl, _, t in groups], fontsize=8)


def cost_groups(run: dict, med: dict) -> tuple[list, list]:
    """(per-request groups, per-MB groups) of cost.png: the live phase of every workload and
    the catch-up read of max-rate ones, leaving out those without a figure for any broker."""
    def some(wl, k):
        return any(v == v for (w, _), m in med.items() if w == wl for v in [m.get(k, float("nan"))])

    per_req, per_mb = [], []
    for w in run["workloads"]:
        per_req += [(w["name"], k, t) for k, t in (("broker_us_per_req", "live (Produce+Fetch)"),
                                                   ("drain_us_per_fetch", "catch-up (Fetch)")) if some(w["name"], k)]
        per_mb += [(w["name"], k, t) for k, t in (("broker_us_per_mb", "live (in+out)"),
                                                  ("drain_us_per_mb", "catch-up (out)")) if some(w["name"], k)]
    return per_req, per_mb


def _cost_plot(run: dict, med: dict, peers: list[str], out_dir, plt) -> list[str]:
    per_req, per_mb = cost_groups(run, med)
    if not per_req and not per_mb:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * (len(per_req) + len(per_mb))), 4))
    for ax, groups, what in ((axes[0], per_req, "request"), (axes[1], per_mb, "MB")):
        if groups:
            _grouped_bars(ax, med, peers, groups)
        ax.set_ylabel(f"broker CPU µs per {what} (median over rounds)")
        ax.set_title(f"Broker CPU per {what} (lower is better)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "cost.png", dpi=110)
    plt.close(fig)
    return ["cost.png"]
