"""Terminal views of `mpbroker placement`: the live per-worker load (`show --watch`) and
the history of moves (`history`). Pure rendering from the admin socket's answers
(`mpbroker/controller/placement.py`), plus the redraw loop of `--watch`.

The watch screen: one line per worker with bars for its share of the broker's bytes
(in + out), requests and CPU over the last interval, the imbalance the balancer sees
(`mpbroker.controller.balance`: max / mean - 1 of the combined load) against
`placement.balance.threshold`, and the hottest partitions. It redraws in place (ANSI
clear) every interval until Ctrl-C or `--count` screens.
"""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Callable

from mpbroker.controller import balance

BAR = 24


def _bar(share: float, width: int = BAR) -> str:
    n = max(0, min(width, round(share * width)))
    return "#" * n + "." * (width - n)


def _sample(show: dict) -> balance.Sample:
    smp = balance.Sample(workers=tuple(w["worker"] for w in show["workers"]))
    for w in show["workers"]:
        smp.worker_cpu[w["worker"]] = w.get("cpu_s_per_s", 0.0)
        for p in w["partitions"]:
            tp = (p["topic"], p["partition"])
            smp.partitions[tp] = balance.PartitionRates(p["bytes_in_per_s"] + p["bytes_out_per_s"],
                                                  p.get("requests_per_s", 0.0))
            smp.owners[tp] = w["worker"]
    return smp


def render_watch(show: dict, threshold: float | None = None, top: int = 5) -> str:
    workers = show["workers"]
    total_b = sum(w["bytes_in_per_s"] + w["bytes_out_per_s"] for w in workers) or 1.0
    total_r = sum(sum(p.get("requests_per_s", 0.0) for p in w["partitions"]) for w in workers) or 1.0
    total_c = sum(w.get("cpu_s_per_s", 0.0) for w in workers) or 1.0
    smp = _sample(show)
    loads = balance.partition_loads(smp)
    per = balance.worker_loads(loads, smp.owners, smp.workers)
    imb = balance.imbalance(per)
    head = (f"placement revision {show['revision']}, {show['num_workers']} workers, "
            f"rates over {show['interval_s']:g}s; imbalance {imb:.0%}")
    if threshold is not None:
        head += f" (threshold {threshold:.0%}: {'over' if imb > threshold else 'within'})"
    lines = [head, f"{'worker':>6} {'parts':>5}  {'bytes':<{BAR}} {'requests':<{BAR}} "
                   f"{'cpu':<{BAR}} {'load':>5}"]
    for w in workers:
        b = (w["bytes_in_per_s"] + w["bytes_out_per_s"]) / total_b
        r = sum(p.get("requests_per_s", 0.0) for p in w["partitions"]) / total_r
        c = w.get("cpu_s_per_s", 0.0) / total_c
        lines.append(f"{w['worker']:>6} {w['num_partitions']:>5}  {_bar(b)} {_bar(r)} "
                     f"{_bar(c)} {per.get(w['worker'], 0.0):>5.0%}")
    hot = sorted(loads.items(), key=lambda kv: -kv[1])[:top]
    if hot and hot[0][1] > 0:
        lines.append("hottest: " + ", ".join(f"{t}-{p} (w{smp.owners[(t, p)]}) {v:.0%}"
                                             for (t, p), v in hot if v > 0))
    return "\n".join(lines)


def watch(call: Callable[[], dict], threshold: float | None, count: int = 0,
          out=sys.stdout, clear: bool = True) -> int:
    """Redraw `render_watch(call())` until Ctrl-C, or `count` screens when count > 0.
    `call` samples over the interval itself, so the loop has no sleep of its own."""
    shown = 0
    try:
        while count <= 0 or shown < count:
            screen = render_watch(call(), threshold)
            if clear:
                out.write("\x1b[H\x1b[2J")
            out.write(screen + "\n")
            out.flush()
            shown += 1
    except KeyboardInterrupt:
        pass
    return 0


def render_history(entries: list[dict]) -> str:
    if not entries:
        return "no moves yet"
    lines = [f"{'time (UTC)':<19} {'partition':<30} {'from':>4} {'to':>4} {'reason':<7} "
             f"{'imbalance':>15} {'unavail ms':>10}"]
    for e in entries:
        ts = datetime.fromtimestamp(e["time_ms"] / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        ib, ia = e.get("imbalance_before"), e.get("imbalance_after_estimate")
        imb = f"{ib:.0%} -> {ia:.0%}" if ib is not None and ia is not None else "-"
        lines.append(f"{ts:<19} {e['topic'] + '-' + str(e['partition']):<30} {e['from']:>4} "
                     f"{e['to']:>4} {e['reason']:<7} {imb:>15} {e['unavailable_ms']:>10.1f}")
    return "\n".join(lines)

