"""Latency histogram with log-spaced buckets (1% relative error), mergeable across processes.

A latency of `v` microseconds goes to bucket `floor(log(v) / log(GROWTH))` (v >= 1; below
1 us is bucket 0). A bucket is reported by its upper edge, so percentiles are never
understated by more than 1%. Histograms travel between processes as `{bucket: count}`
dicts (a few hundred entries), not as millions of samples. No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

GROWTH = 1.01
_LOG_GROWTH = math.log(GROWTH)


def bucket_of(us: float) -> int:
    return 0 if us < 1.0 else int(math.log(us) / _LOG_GROWTH)


def upper_edge_us(bucket: int) -> float:
    return GROWTH ** (bucket + 1)


class Histogram:
    def __init__(self, counts: dict[int, int] | None = None):
        self.counts: dict[int, int] = {int(k): int(v) for k, v in (counts or {}).items()}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add_ns(self, latencies_ns: Iterable[int]) -> "Histogram":
        """Add latencies given in nanoseconds (numpy when it is there: millions of samples)."""
        try:
            import numpy as np
        except ImportError:
            for ns in latencies_ns:
                b = bucket_of(ns / 1000.0)
                self.counts[b] = self.counts.get(b, 0) + 1
            return self
        us = np.asarray(latencies_ns, dtype=np.float64) / 1000.0
        if us.size == 0:
            return self
        buckets = np.where(us < 1.0, 0, np.floor(np.log(np.maximum(us, 1.0)) / _LOG_GROWTH)).astype(np.int64)
        values, counts = np.unique(buckets, return_counts=True)
        for b, c in zip(values.tolist(), counts.tolist()):
            self.counts[b] = self.counts.get(b, 0) + c
        return self

    def merge(self, other: "Histogram") -> "Histogram":
        for b, c in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
        return self

    def percentile_us(self, q: float) -> float:
        """The q-th percentile (0 < q <= 100) in microseconds; NaN when empty."""
        total = self.total
        if total == 0:
            return float("nan")
        rank = max(1, math.ceil(q / 100.0 * total))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return upper_edge_us(b)
        return upper_edge_us(max(self.counts))

    def cdf(self) -> list[tuple[float, float]]:
        """[(latency_us, fraction <= latency)] in increasing latency."""
        total, seen, out = self.total, 0, []
        for b in sorted(self.counts):
            seen += self.counts[b]
            out.append((upper_edge_us(b), seen / total))
        return out

    def to_json(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.counts.items())}

    @classmethod
    def from_json(cls, data: dict) -> "Histogram":
        return cls({int(k): v for k, v in data.items()})
