"""The balancing decision of `mpbroker placement balance`: pure functions, no I/O.

Load of a partition. Each worker reports, per partition it owns, bytes in and out per
second and requests per second (partition-level parts of Produce, Fetch, ListOffsets...
run by the owner), and for itself the CPU it used (seconds per second). A partition's
load is the mean of its shares of the three resources, each normalised by the broker's
total of it, so that the dimensions weigh the same whatever their units:

    load(p) = w_bytes * bytes(p)/sum(bytes) + w_req * req(p)/sum(req)
              + w_cpu * cpu(p)/sum(cpu)          (weights summing to 1, default 1/3 each)

where cpu(p) is its worker's CPU split over the worker's partitions by their share of
the worker's requests and bytes (the process cannot tell which partition its CPU went
to; requests and bytes are what costs CPU here). A worker's load is the sum over its
partitions; a dimension with a zero total drops out (its weight goes to the others).

Imbalance = max(worker load) / mean(worker load) - 1. `plan` returns no move while it is
at most `threshold` (`placement.balance.threshold`); otherwise the fewest moves it can
find that bring every worker within `mean * (1 + threshold)`: first an exact search
over all sets of one, then two moves (iterative deepening: the first depth that reaches
the threshold is the minimum), then, for heavier skews, greedy steps that each move the
partition that best halves the gap between the most and the least loaded worker. A move
is only made when it lowers the maximum worker load (no oscillation between two equal
layouts). Pinned partitions (`placement.*`) and partitions moved less than the cooldown
ago stay put; their load counts where they are.

Damping for the continuous mode (`placement.balance.interval.ms`): `Smoother` keeps an
exponentially weighted moving average of each partition's three rates (weight `alpha`
of the newest sample), so a burst does not trigger a move on its own, and the caller
passes the partitions moved within `placement.balance.cooldown.ms` as `frozen`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Mapping

TP = tuple[str, int]

DIMENSIONS = ("bytes", "requests", "cpu")
EXACT_DEPTH = 2                  # exact search up to this many moves
EXACT_BUDGET = 200_000           # candidate sets evaluated at most by the exact search


@dataclass(frozen=True)
class PartitionRates:
    bytes_per_s: float = 0.0
    requests_per_s: float = 0.0


@dataclass
class Sample:
    """One measurement: per partition rates and owner, per worker CPU (s/s)."""
    partitions: dict[TP, PartitionRates] = field(default_factory=dict)
    owners: dict[TP, int] = field(default_factory=dict)
    worker_cpu: dict[int, float] = field(default_factory=dict)
    workers: tuple[int, ...] = ()


def partition_loads(sample: Sample, weights: Mapping[str, float] | None = None) -> dict[TP, float]:
    """load(p) as in the module docstring; the sum over all partitions is 1 when any
    dimension has a non-zero total (else every load is 0)."""
    w = dict(weights or {d: 1 / 3 for d in DIMENSIONS})
    parts = sample.partitions
    by_worker: dict[int, list[TP]] = {}
    for tp in parts:
        by_worker.setdefault(sample.owners.get(tp, -1), []).append(tp)
    cpu: dict[TP, float] = {}
    for wid, tps in by_worker.items():
        total_cpu = max(0.0, sample.worker_cpu.get(wid, 0.0))
        req = sum(parts[tp].requests_per_s for tp in tps)
        byt = sum(parts[tp].bytes_per_s for tp in tps)
        for tp in tps:
            share = 0.0
            n = 0
            if req > 0:
                share += parts[tp].requests_per_s / req
                n += 1
            if byt > 0:
                share += parts[tp].bytes_per_s / byt
                n += 1
            cpu[tp] = total_cpu * (share / n if n else 0.0)
    raw = {
        "bytes": {tp: max(0.0, r.bytes_per_s) for tp, r in parts.items()},
        "requests": {tp: max(0.0, r.requests_per_s) for tp, r in parts.items()},
        "cpu": cpu,
    }
    totals = {d: sum(raw[d].values()) for d in DIMENSIONS}
    live = [d for d in DIMENSIONS if totals[d] > 0 and w.get(d, 0) > 0]
    if not live:
        return dict.fromkeys(parts, 0.0)
    wsum = sum(w[d] for d in live)
    return {tp: sum(w[d] / wsum * raw[d][tp] / totals[d] for d in live) for tp in parts}


def worker_loads(loads: Mapping[TP, float], owners: Mapping[TP, int],
                 workers: Iterable[int]) -> dict[int, float]:
    out = dict.fromkeys(workers, 0.0)
    for tp, load in loads.items():
        w = owners.get(tp)
        if w in out:
            out[w] += load
    return out


def imbalance(per_worker: Mapping[int, float]) -> float:
    """max / mean - 1 (0 when there is no load or one worker)."""
    if len(per_worker) < 2:
        return 0.0
    mean = sum(per_worker.values()) / len(per_worker)
    return 0.0 if mean <= 0 else max(per_worker.values()) / mean - 1


def plan(loads: Mapping[TP, float], owners: Mapping[TP, int], workers: Iterable[int],
         threshold: float, frozen: Iterable[TP] = (), max_moves: int = 64) -> list[tuple[TP, int, int]]:
    """[(partition, from, to)]: the fewest moves found that bring every worker's load
    within mean * (1 + threshold); [] when already within it, or when no move lowers
    the most loaded worker's load."""
    workers = sorted(set(workers))
    if len(workers) < 2:
        return []
    owners = {tp: owners[tp] for tp in loads if owners.get(tp) in workers}
    per = worker_loads(loads, owners, workers)
    mean = sum(per.values()) / len(workers)
    if mean <= 0 or imbalance(per) <= threshold:
        return []
    limit = mean * (1 + threshold) + 1e-12
    frozen = set(frozen)
    movable = [tp for tp in owners if tp not in frozen and loads[tp] > 0]
    best = _exact(loads, owners, per, workers, movable, limit, min(EXACT_DEPTH, max_moves))
    if best is not None:
        return best
    return _greedy(loads, owners, per, workers, movable, limit, max_moves)


def _exact(loads, owners, per, workers, movable, limit, depth):
    """The smallest set of at most `depth` moves reaching the limit (ties: the lowest
    resulting maximum), or None. Only partitions of over-limit workers move in one step;
    with two steps the second may come from any worker (a swap)."""
    over = {w for w, load in per.items() if load > limit}
    evaluated = 0
    for k in range(1, depth + 1):
        best, best_max = None, None
        srcs = [tp for tp in movable if owners[tp] in over] if k == 1 else movable
        for combo in itertools.combinations(srcs, k):
            if k > 1 and not any(owners[tp] in over for tp in combo):
                continue
            for dests in itertools.product(workers, repeat=k):
                evaluated += 1
                if evaluated > EXACT_BUDGET:   # k is still minimal; None: greedy
                    return best_moves(best, owners)
                if any(d == owners[tp] for tp, d in zip(combo, dests)):
                    continue
                after = dict(per)
                for tp, d in zip(combo, dests):
                    after[owners[tp]] -= loads[tp]
                    after[d] += loads[tp]
                m = max(after.values())
                if m <= limit and (best_max is None or m < best_max - 1e-12):
                    best, best_max = list(zip(combo, dests)), m
        if best is not None:
            return best_moves(best, owners)
    return None


def best_moves(best, owners):
    if best is None:
        return None
    return [(tp, owners[tp], d) for tp, d in best]


def _greedy(loads, owners, per, workers, movable, limit, max_moves):
    per = dict(per)
    where = dict(owners)
    moved: list[tuple[TP, int, int]] = []
    pool = set(movable)
    while len(moved) < max_moves and max(per.values()) > limit:
        src = max(workers, key=lambda w: (per[w], -w))
        dst = min(workers, key=lambda w: (per[w], w))
        gap = per[src] - per[dst]
        cands = [tp for tp in pool if where[tp] == src]
        if not cands or gap <= 0:
            break
        # the partition closest to half the gap lowers max(src, dst) the most
        tp = min(cands, key=lambda t: (abs(loads[t] - gap / 2), t))
        if max(per[src] - loads[tp], per[dst] + loads[tp]) >= per[src]:
            break       # no move lowers the hottest worker
        per[src] -= loads[tp]
        per[dst] += loads[tp]
        where[tp] = dst
        pool.discard(tp)
        moved.append((tp, src, dst))
    return moved


class Smoother:
    """Exponentially weighted moving averages of each partition's rates and each
    worker's CPU (`alpha`: the newest sample's weight); a partition seen for the first
    time starts at its sample, one that disappears is forgotten."""

    def __init__(self, alpha: float = 0.3):
        self.alpha = alpha
        self.parts: dict[TP, PartitionRates] = {}
        self.cpu: dict[int, float] = {}

    def update(self, sample: Sample) -> Sample:
        a = self.alpha
        parts = {}
        for tp, r in sample.partitions.items():
            old = self.parts.get(tp)
            parts[tp] = r if old is None else PartitionRates(
                a * r.bytes_per_s + (1 - a) * old.bytes_per_s,
                a * r.requests_per_s + (1 - a) * old.requests_per_s)
        cpu = {}
        for wid, c in sample.worker_cpu.items():
            old = self.cpu.get(wid)
            cpu[wid] = c if old is None else a * c + (1 - a) * old
        self.parts, self.cpu = parts, cpu
        return Sample(dict(parts), dict(sample.owners), dict(cpu), sample.workers)
