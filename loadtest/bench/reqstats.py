"""Client-side request counts from librdkafka's statistics, and broker CPU per request.

The benchmarks compare brokers that count their requests differently (or not at all), so
the request counts come from the clients, the same way for every broker: librdkafka
emits a JSON document every `statistics.interval.ms` to confluent-kafka's `stats_cb`.
Per broker connection it holds `req`, the requests of each type sent so far
({"Produce": n, "Fetch": m, ...}, the names of librdkafka's STATISTICS.md), and at the
top `ts`, librdkafka's monotonic clock in µs (CLOCK_MONOTONIC on Linux, the clock of
Python's time.monotonic_ns()).

`ReqStats` (one per client) keeps a snapshot per document: (wall-clock ns, {type: count
summed over the client's broker connections}) for the types in TYPES. Its time is `ts`
moved onto time.time_ns() (the benchmark's windows are wall-clock), so a callback served
late still has the time the counters were read.

Requests inside a window [w0, w1] (`count_in`):
* rate: with two or more snapshots inside the window, the first and the last of them give
  the request rate, which is scaled to the window's length (so no snapshot outside the
  window is needed, and the warm-up before it or a flush after it is not counted);
* otherwise the counter linearly interpolated at w0 and at w1 between the snapshots on
  either side of each edge (`value_at`);
* otherwise None: not measurable.

Cost (`us_per`): broker CPU seconds x 1e6 / a count (requests, or MB moved).
"""

from __future__ import annotations

import re
import time

NS = 1_000_000_000
TYPES = ("Produce", "Fetch")
_TS = re.compile(r'"ts":\s*(\d+)')          # the first one is the document's (4th top-level key)
_REQ = re.compile(r'"req":\s*\{([^}]*)\}')  # one flat object per broker connection
_COUNT = {t: re.compile(rf'"{t}":\s*(\d+)') for t in TYPES}

Snapshot = tuple[int, dict[str, int]]       # (wall-clock ns, {type: requests sent so far})


def parse(doc: str) -> tuple[int | None, dict[str, int]]:
    """(`ts` in µs or None, {type: requests summed over every broker connection}) of one
    statistics document. Regular expressions rather than json.loads: a consumer of 100
    partitions gets ~80 kB documents, which json.loads takes ~0.5 ms to read on the
    consumer's thread (time that would show as end-to-end latency); these take ~40 µs."""
    ts = _TS.search(doc)
    counts = dict.fromkeys(TYPES, 0)
    for req in _REQ.findall(doc):
        for t, rx in _COUNT.items():
            m = rx.search(req)
            if m:
                counts[t] += int(m.group(1))
    return (int(ts.group(1)) if ts else None), counts


class ReqStats:
    """The snapshots of one client. `config()` goes into the client's configuration; the
    client's poll() / consume() / flush() serve the callback."""

    def __init__(self, interval_ms: int):
        self.interval_ms = int(interval_ms)
        self.snaps: list[Snapshot] = []
        self.settled = False        # settle() saw the snapshot it waited for
        self._offset_ns = time.time_ns() - time.monotonic_ns()

    def config(self) -> dict:
        return {"statistics.interval.ms": self.interval_ms, "stats_cb": self.on_stats}

    def on_stats(self, doc: str) -> None:
        ts_us, counts = parse(doc)
        now = time.time_ns()
        t = now if ts_us is None else ts_us * 1000 + self._offset_ns
        if abs(t - now) > 5 * NS:  # `ts` on another clock than time.monotonic's: take the callback's time
            t = now
        self.snaps.append((t, counts))

    def assume_zero_at(self, t_ns: int) -> None:
        """A snapshot of zero requests at `t_ns`, for a client that sent none of TYPES before
        then (e.g. a consumer that assigns its partitions at that time)."""
        self.snaps.append((t_ns, dict.fromkeys(TYPES, 0)))

    def settle(self, poll, after_ns: int, timeout_s: float | None = None) -> bool:
        """Serve the client's callbacks (`poll(seconds)`: Producer.poll, Consumer.poll; what
        it returns is dropped) until a snapshot taken at or after `after_ns` is in, so that
        the counts at `after_ns` can be interpolated. False if none came in time."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 3 * self.interval_ms / 1000 + 1)
        while max((t for t, _ in self.snaps), default=-1) < after_ns:
            left = deadline - time.monotonic()
            if left <= 0:
                self.settled = False
                return False
            poll(min(0.05, left))
        self.settled = True
        return True

    def final(self) -> dict[str, int]:
        """The counts of the latest snapshot once settle() succeeded (the requests sent up to
        the end of the client's work, for a client that then sends no more of them); {}
        otherwise."""
        if not self.settled or not self.snaps:
            return {}
        return dict(max(self.snaps, key=lambda s: s[0])[1])

    def count_in(self, w0: int, w1: int) -> dict[str, float | None]:
        return {t: count_in(self.snaps, w0, w1, t) for t in TYPES}

    def value_at(self, t_ns: int) -> dict[str, float | None]:
        return {t: value_at(self.snaps, t_ns, t) for t in TYPES}


def interpolate(points: list[tuple[int, float]], t: int) -> float | None:
    """The value at `t` on the line between the points on either side of it (a point at
    exactly `t` as it is); None when `t` is not between two points."""
    before = [p for p in points if p[0] <= t]
    after = [p for p in points if p[0] >= t]
    if not before or not after:
        return None
    (ta, va) = max(before, key=lambda p: p[0])
    (tb, vb) = min(after, key=lambda p: p[0])
    if tb == ta:
        return float(va)
    return va + (vb - va) * (t - ta) / (tb - ta)


def value_at(snaps: list[Snapshot], t: int, key: str) -> float | None:
    return interpolate([(ts, c[key]) for ts, c in snaps], t)


def count_in(snaps: list[Snapshot], w0: int, w1: int, key: str) -> float | None:
    """Requests of type `key` sent in [w0, w1] (the module docstring says how)."""
    inside = sorted(((ts, c[key]) for ts, c in snaps if w0 <= ts <= w1), key=lambda p: p[0])
    if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
        (ta, ca), (tb, cb) = inside[0], inside[-1]
        return (cb - ca) / (tb - ta) * (w1 - w0)
    a, b = value_at(snaps, w0, key), value_at(snaps, w1, key)
    return None if a is None or b is None else b - a


def total(counts: list[dict], key: str) -> float | None:
    """Sum of `key` over the clients' count dicts; None if any client could not count it."""
    vals = [c.get(key) for c in counts]
    return None if not vals or any(v is None for v in vals) else float(sum(vals))


def us_per(cpu_s: float | None, n: float | None) -> float | None:
    """Broker CPU µs per unit (request, MB); None when either is unknown or n is 0."""
    if cpu_s is None or not n or cpu_s != cpu_s or n != n:
        return None
    return cpu_s * 1e6 / n


def interval_ms(window_s: float) -> int:
    """Statistics interval for a window: about ten snapshots in it, between 100 ms and 1 s."""
    return int(min(1000, max(100, window_s * 100)))
