"""New connections while one worker is stopped (SIGSTOP): how many wait, for how long.

    .venv/bin/python -m loadtest.bench_stall [--rounds 3] [--stop-s 15] [--rate 4]
                                             [--timeout-s 10] [--migrate]

For each variant of `worker.listener.eviction.ms` (3000, the default; 1000; 0 = off,
the behaviour before: only the 30 s heartbeat timeout acts) a broker with num.workers=2
is started; worker 1 is stopped with SIGSTOP for `--stop-s` seconds while new TCP
connections arrive at `--rate` per second, each sending an ApiVersions v0 request and
waiting up to `--timeout-s` for the answer (one thread per connection, so a hung one
does not hold up the next). Printed per variant: connections, answered within 1 s,
not answered within the timeout (a reset counts as answered late: the client learns at
once and reconnects; it is listed apart), the median and max answer time, and the time
from SIGSTOP to the supervisor's "taken out of the listener group" line.

`--migrate` also runs the default variant with the `net.ipv4.tcp_migrate_req` sysctl
set to 1 (root; restored afterwards): connections queued on the stopped worker when it
is taken out then move to the other worker's queue instead of being reset.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import struct
import sys
import threading
import time

from loadtest.peers import MpbrokerPeer, make_workdir

SERVING = re.compile(rb"worker (\d+) \(pid (\d+)\) serving on")
EVICTED = b"taken out of the listener group"
MIGRATE_SYSCTL = "/proc/sys/net/ipv4/tcp_migrate_req"


def probe(port: int, timeout: float) -> tuple[str, float]:
    """('ok' | 'reset' | 'timeout', seconds) of one new connection's ApiVersions v0."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(max(0.01, timeout - (time.monotonic() - t0)))
            payload = struct.pack(">hhih", 18, 0, 1, 5) + b"stall"
            s.sendall(struct.pack(">i", len(payload)) + payload)
            head = s.recv(4)
            if len(head) < 4:
                return "reset", time.monotonic() - t0
            return "ok", time.monotonic() - t0
    except socket.timeout:
        return "timeout", time.monotonic() - t0
    except OSError:
        return "reset", time.monotonic() - t0


def run_variant(eviction_ms: int, stop_s: float, rate: float, timeout_s: float) -> dict:
    peer = MpbrokerPeer(make_workdir("bench-stall-"),
                        {"num.workers": 2, "worker.listener.eviction.ms": eviction_ms})
    peer.start()
    try:
        deadline = time.monotonic() + 30
        pids: dict[int, int] = {}
        while time.monotonic() < deadline and len(pids) < 2:
            pids = {int(w): int(p) for w, p in SERVING.findall(peer.log_path.read_bytes())}
            time.sleep(0.05)
        if len(pids) < 2:
            raise RuntimeError(f"2 workers not serving; log:\n{peer.log_tail()}")
        mark = len(peer.log_path.read_bytes())
        results: list[tuple[str, float]] = []
        lock = threading.Lock()

        def one():
            r = probe(peer.port, timeout_s)
            with lock:
                results.append(r)

        threads = []
        evicted_after = None
        os.kill(pids[1], signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            while time.monotonic() - t_stop < stop_s:
                t = threading.Thread(target=one, daemon=True)
                t.start()
                threads.append(t)
                time.sleep(1 / rate)
                if evicted_after is None and EVICTED in peer.log_path.read_bytes()[mark:]:
                    evicted_after = time.monotonic() - t_stop
        finally:
            os.kill(pids[1], signal.SIGCONT)
        for t in threads:
            t.join(timeout_s + 5)
        times = sorted(d for k, d in results if k == "ok")
        return {
            "connections": len(results),
            "within_1s": sum(1 for k, d in results if k == "ok" and d <= 1.0),
            "timeouts": sum(1 for k, _ in results if k == "timeout"),
            "resets": sum(1 for k, _ in results if k == "reset"),
            "median_s": statistics.median(times) if times else None,
            "max_s": max(d for _, d in results) if results else None,
            "evicted_after_s": evicted_after,
        }
    finally:
        peer.stop()


def set_migrate(value: str) -> str:
    with open(MIGRATE_SYSCTL) as f:
        old = f.read().strip()
    with open(MIGRATE_SYSCTL, "w") as f:
        f.write(value)
    return old


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stop-s", type=float, default=15.0)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--timeout-s", type=float, default=10.0)
    ap.add_argument("--migrate", action="store_true")
    ap.add_argument("--variants", default="3000,1000,0",
                    help="worker.listener.eviction.ms values, comma-separated")
    args = ap.parse_args(argv)
    variants = [(int(v), False) for v in args.variants.split(",")]
    if args.migrate:
        variants.append((3000, True))
    rows = []
    for eviction_ms, migrate in variants:
        runs = []
        old = set_migrate("1") if migrate else None
        try:
            for _ in range(args.rounds):
                runs.append(run_variant(eviction_ms, args.stop_s, args.rate, args.timeout_s))
        finally:
            if old is not None:
                set_migrate(old)
        rows.append((eviction_ms, migrate, runs))
    print(f"SIGSTOP of 1 of 2 workers for {args.stop_s:g}s, {args.rate:g} new connections/s, "
          f"timeout {args.timeout_s:g}s; medians of {args.rounds} rounds")
    print("| eviction.ms | tcp_migrate_req | connections | answered <= 1 s | reset | "
          "timed out | median answer | max | eviction logged after |")
    print("|---|---|---|---|---|---|---|---|---|")

    def med(runs, key, fmt="{:.0f}"):
        vals = [r[key] for r in runs if r[key] is not None]
        return fmt.format(statistics.median(vals)) if vals else "-"
    for eviction_ms, migrate, runs in rows:
        print(f"| {eviction_ms or 'off'} | {1 if migrate else 0} | {med(runs, 'connections')} | "
              f"{med(runs, 'within_1s')} | {med(runs, 'resets')} | {med(runs, 'timeouts')} | "
              f"{med(runs, 'median_s', '{:.3f} s')} | {med(runs, 'max_s', '{:.1f} s')} | "
              f"{med(runs, 'evicted_after_s', '{:.1f} s')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
