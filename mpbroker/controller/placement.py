"""The placement map's one writer, and the local admin endpoint of `mpbroker placement`.

Runs in the controller process (ARCHITECTURE §1 puts the placement map and the admin
endpoint in the supervisor; they live here instead because the controller process
already has an event loop, the ordered channel to every worker and the data directory's
metadata store, while the supervisor's main loop is a select loop that only writes to
its children; deviation by design, same single-writer guarantee).

* `PlacementManager` loads `<log.dirs[0]>/__mpbroker_metadata/placement.json`,
  reconciles it with this start (`PlacementTable.reconcile`: config `placement.*` keys,
  the number of workers) and saves each new revision (tmp + fsync + rename) *before*
  pushing it to the workers (`{"op": "placement", "table"}` on the controller channel,
  ordered with the metadata pushes). Workers answer `placement_applied(worker, revision)`
  once they reconciled their partitions with it; a worker asks for the table at boot
  (`placement` RPC) before it opens any log.
* A live move of one partition is two revisions: first the partition is *in transit*
  (owner -1: the old owner flushes and closes its log, nobody serves it, requests get
  NOT_LEADER_OR_FOLLOWER and clients retry), then, once the old owner acknowledged (or
  is dead), the new owner; the move returns when the new owner acknowledged it opened
  the log, with the time the partition was unavailable. Two processes never have the
  same log open.
* `balance` measures, per partition, bytes in + out per second and requests per second
  (each worker counts the partition-level requests it receives as the front; the counts
  are summed here), and each worker's CPU seconds per second, over an interval; the
  decision is `mpbroker.controller.balance.plan` (nothing moves below
  `placement.balance.threshold`, else the fewest moves found that bring every worker
  within it). Partitions pinned by `placement.*` config stay put, and `move` refuses
  them, unless the request says `include_pinned`; partitions moved less than
  `placement.balance.cooldown.ms` ago stay put too.
* Continuous balancing (`placement.balance.interval.ms` > 0): every interval a sample
  over `min(interval, 5 s)` feeds the exponentially weighted averages
  (`balance.Smoother`), and `plan` runs on them; moves are made like `balance`'s.
* History: every move (by `move`, `balance` or the continuous balancer) is appended to
  `<log.dirs[0]>/__mpbroker_metadata/placement-history.jsonl` (one JSON object a line:
  time_ms, topic, partition, from, to, reason, imbalance before and after, unavailable
  ms); the file keeps the newest `HISTORY_KEEP` lines. `mpbroker placement history`.
* CPU % per worker: psutil's `Process(pid).cpu_percent()` over the sampling interval
  (primed at the first sample, read at the second).
* The admin endpoint: a Unix socket at `admin.socket` (default
  `<log.dirs[0]>/.mpbroker-admin.sock`); one JSON line in (`{"cmd": "show"|"move"|
  "balance", ...}`), one JSON line out. Only local users with access to the data
  directory reach it.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import psutil

from mpbroker.controller import balance as balancer    # `balance` is a method here
from mpbroker.metadata.placement import IN_TRANSIT, PlacementTable, parse_config
from storage import space_reserve

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 15.0
ASK_TIMEOUT_S = 5.0
HISTORY_KEEP = 1000               # lines of placement-history.jsonl kept
AUTO_SAMPLE_MAX_S = 5.0           # the continuous balancer's sampling window, at most


def _cpu_meters(pids: dict[int, int]) -> dict:
    """{worker: psutil.Process} primed for `cpu_percent` (its first call starts the
    measurement, the next one returns the CPU % in between)."""
    out = {}
    for wid, pid in pids.items():
        try:
            proc = psutil.Process(pid)
            proc.cpu_percent(None)
            out[wid] = proc
        except psutil.Error:
            pass
    return out


def _cpu_percent(proc, pid: int) -> float:
    """CPU % of the worker since `_cpu_meters`; 0.0 when it was respawned meanwhile (a
    new pid) or is gone."""
    if proc is None or proc.pid != pid:
        return 0.0
    try:
        return proc.cpu_percent(None)
    except psutil.Error:
        return 0.0


def _partition_request_rates(a: dict, b: dict) -> dict:
    """{(topic, partition): requests/s} summed over the workers (each counts what it
    received as the front, whoever owns the partition) between stats samples a and b."""
    out: dict = {}
    for wid, s2 in b.items():
        s1 = a.get(wid)
        if not s1 or s1.get("pid") != s2.get("pid"):
            continue            # respawned meanwhile: its counters restarted
        dt = max(1e-6, s2["time"] - s1["time"])
        before = {(t, p): n for t, p, n in s1.get("partition_requests") or ()}
        for t, p, n in s2.get("partition_requests") or ():
            d = n - before.get((t, p), 0)
            if d > 0:
                out[(t, p)] = out.get((t, p), 0.0) + d / dt
    return out


def placement_path(log_dir: str) -> str:
    return os.path.join(log_dir, "__mpbroker_metadata", "placement.json")


def unix_path(path: str) -> str:
    """A name for bind/connect within the 108-byte sun_path limit: long paths go through
    /proc/self/fd/<dir fd>/<name> (the dir fd stays open for the process's life)."""
    if len(path.encode()) < 100:
        return path
    d, name = os.path.split(path)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{name}"


def history_path(log_dir: str) -> str:
    return os.path.join(log_dir, "__mpbroker_metadata", "placement-history.jsonl")


def load_table(path: str) -> PlacementTable | None:
    try:
        with open(path) as f:
            return PlacementTable.from_json(json.load(f))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as e:
        log.error("ignoring an unreadable placement map %s: %s", path, e)
        return None


def save_table(path: str, table: PlacementTable) -> None:
    # on a full disk the space reserve of the metadata dir makes room (storage/space_reserve.py)
    space_reserve.write(os.path.dirname(path), lambda: _write_table(path, table))


def _write_table(path: str, table: PlacementTable) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(table.to_json(), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class PlacementManager:
    def __init__(self, cfg, service, num_workers: int | None = None):
        self.cfg = cfg
        self.service = service          # controller_rpc.ControllerService: links, broadcast
        self.path = placement_path(cfg.log_dirs[0])
        n = num_workers if num_workers is not None else cfg.num_workers
        old = load_table(self.path) or PlacementTable(0, n)
        self.table = old.reconcile(n, parse_config(cfg.placement))
        if old.num_workers != n and old.revision:
            log.info("num.workers changed from %d to %d: partitions redistributed",
                     old.num_workers, n)
        save_table(self.path, self.table)
        self.applied: dict[int, int] = {}
        self.changed = asyncio.Event()
        self._asks: dict[int, asyncio.Future] = {}
        self._next_ask = 0
        self._lock = asyncio.Lock()
        self.server = None
        self.admin_path = None
        self.history_path = history_path(cfg.log_dirs[0])
        self.threshold = float(cfg["placement.balance.threshold"])
        self.interval_s = cfg["placement.balance.interval.ms"] / 1000
        self.cooldown_s = cfg["placement.balance.cooldown.ms"] / 1000
        self.last_moved: dict[tuple[str, int], float] = {}   # monotonic time of the last move
        self.smoother = balancer.Smoother()
        self._auto: asyncio.Task | None = None

    # ------------------------------------------------------------ worker messages
    def on_worker_message(self, wid: int | None, method: str, args) -> object:
        if method == "placement":
            return self.table
        if method == "placement_applied":
            w, rev = args
            self.applied[w] = max(rev, self.applied.get(w, 0))
            self.changed.set()
        elif method == "worker_reply":
            rid, result = args
            fut = self._asks.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result(result)
        return None

    def worker_lost(self, wid: int) -> None:
        self.applied.pop(wid, None)
        self.changed.set()

    # ------------------------------------------------------------ revisions
    def publish(self, table: PlacementTable) -> None:
        save_table(self.path, table)
        self.table = table
        self.service.broadcast({"op": "placement", "table": table})

    async def wait_applied(self, wid: int, revision: int, timeout: float = ACK_TIMEOUT_S) -> bool:
        """Until worker `wid` applied `revision` (True), or is not connected (False)."""
        deadline = time.monotonic() + timeout
        while self.applied.get(wid, 0) < revision:
            link = self.service.links.get(wid)
            if link is None or link.closed:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"worker {wid} did not apply placement revision {revision}")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass
        return True

    # ------------------------------------------------------------ asking the workers
    async def ask_all(self, what: str, timeout: float = ASK_TIMEOUT_S) -> dict[int, dict]:
        futs = {}
        loop = asyncio.get_running_loop()
        for wid, link in list(self.service.links.items()):
            if link.closed:
                continue
            self._next_ask += 1
            rid = self._next_ask
            fut = self._asks[rid] = loop.create_future()
            try:
                link.send({"op": "ask", "rid": rid, "what": what})
            except ConnectionError:
                self._asks.pop(rid, None)
                continue
            futs[wid] = (rid, fut)
        out = {}
        deadline = time.monotonic() + timeout
        for wid, (rid, fut) in futs.items():
            try:
                res = await asyncio.wait_for(fut, max(0.01, deadline - time.monotonic()))
            except (asyncio.TimeoutError, ConnectionError):
                self._asks.pop(rid, None)
                continue
            if res is not None:       # None: the worker is still booting
                out[wid] = res
        return out

    async def sample(self, interval: float) -> dict:
        """Two stats samples `interval` apart; rates per worker and per partition."""
        a = await self.ask_all("stats")
        cpu = _cpu_meters({wid: s["pid"] for wid, s in a.items()})
        await asyncio.sleep(max(0.05, interval))
        b = await self.ask_all("stats")
        req_rate = _partition_request_rates(a, b)
        workers = []
        for wid in sorted(b):
            s2 = b[wid]
            s1 = a.get(wid) if a.get(wid, {}).get("pid") == s2["pid"] else None
            dt = max(1e-6, s2["time"] - s1["time"]) if s1 else None

            def rate(key, s1=s1, s2=s2, dt=dt):
                return (s2[key] - s1[key]) / dt if s1 else 0.0
            parts = []
            for name, p2 in sorted(s2["partitions"].items(),
                                   key=lambda kv: (kv[1]["topic"], kv[1]["partition"])):
                p1 = s1["partitions"].get(name) if s1 else None
                rin = (p2["bytes_in"] - p1["bytes_in"]) / dt if p1 else 0.0
                rout = (p2["bytes_out"] - p1["bytes_out"]) / dt if p1 else 0.0
                parts.append({"topic": p2["topic"], "partition": p2["partition"],
                              "bytes_in_per_s": max(0.0, rin), "bytes_out_per_s": max(0.0, rout),
                              "requests_per_s": req_rate.get((p2["topic"], p2["partition"]), 0.0),
                              "size": p2["size"]})
            workers.append({
                "worker": wid, "pid": s2["pid"], "cores": s2["cores"],
                "placement_revision": s2["placement_revision"],
                "partitions": parts, "num_partitions": len(parts),
                "bytes_in_per_s": max(0.0, rate("bytes_in")),
                "bytes_out_per_s": max(0.0, rate("bytes_out")),
                "requests_per_s": max(0.0, rate("requests")),
                "served_for_peers_per_s": max(0.0, rate("requests_served")),
                "cpu_percent": _cpu_percent(cpu.get(wid), s2["pid"]),
                "cpu_s_per_s": max(0.0, rate("cpu_s")),
                "purgatory": s2["purgatory"], "fetch_sessions": s2["fetch_sessions"],
                # connections moved to and from other workers since it started
                "handed_over": s2.get("handed_over", 0), "taken_over": s2.get("taken_over", 0),
                "connections": s2["connections"]})
        return {"num_workers": self.table.num_workers, "revision": self.table.revision,
                "interval_s": interval, "workers": workers}

    # ------------------------------------------------------------ admin commands
    async def show(self, interval: float = 1.0) -> dict:
        return await self.sample(interval)

    def _check_partition(self, topic: str, partition: int) -> None:
        md = self.service.ctl.metadata()
        t = md.topics.get(topic)
        if t is None or partition not in t.partitions:
            raise ValueError(f"unknown partition {topic}-{partition}")

    async def move(self, topic: str, partition: int, worker: int,
                   include_pinned: bool = False) -> dict:
        n = self.table.num_workers
        if not 0 <= worker < n:
            raise ValueError(f"worker must be in 0..{n - 1}")
        self._check_partition(topic, partition)
        pin = self.table.pinned(topic, partition)
        if pin is not None and pin != worker and not include_pinned:
            raise ValueError(f"{topic}-{partition} is pinned to worker {pin} by the placement.* "
                             f"config; --include-pinned moves it anyway (until the next start)")
        async with self._lock:
            return await self._move_many({(topic, partition): worker})

    async def _move_many(self, moves: dict, reason: str = "move",
                         decision: dict | None = None) -> dict:
        """Move partitions live: in transit, old owners closed, then new owners opened."""
        old = {tp: self.table.owner(*tp) for tp in moves}
        moves = {tp: w for tp, w in moves.items() if old[tp] != w}
        if not moves:
            return {"moved": [], "unavailable_ms": 0.0, "revision": self.table.revision}
        t0 = time.monotonic()
        self.publish(self.table.assign({tp: IN_TRANSIT for tp in moves}))
        rev = self.table.revision
        for w in sorted({old[tp] for tp in moves if old[tp] >= 0}):
            await self.wait_applied(w, rev)
        closed = time.monotonic()
        self.publish(self.table.assign(moves))
        rev = self.table.revision
        for w in sorted(set(moves.values())):
            await self.wait_applied(w, rev)
        done = time.monotonic()
        for tp in moves:
            self.last_moved[tp] = done
        now_ms = int(time.time() * 1000)
        self.record([{"time_ms": now_ms, "topic": t, "partition": p, "from": old[(t, p)],
                      "to": w, "reason": reason,
                      "imbalance_before": (decision or {}).get("imbalance_before"),
                      "imbalance_after_estimate": (decision or {}).get("imbalance_after_estimate"),
                      "unavailable_ms": round((done - t0) * 1000, 3)}
                     for (t, p), w in moves.items()])
        log.info("placement (%s): moved %s in %.1f ms", reason,
                 ", ".join(f"{t}-{p} {old[(t, p)]}->{w}" for (t, p), w in moves.items()),
                 (done - t0) * 1000)
        return {"moved": [{"topic": t, "partition": p, "from": old[(t, p)], "to": w}
                          for (t, p), w in moves.items()],
                "unavailable_ms": round((done - t0) * 1000, 3),
                "close_ms": round((closed - t0) * 1000, 3), "revision": rev}

    def _balance_input(self, s: dict, include_pinned: bool) -> tuple[balancer.Sample, set]:
        """The planner's Sample from a `sample()` result, and the partitions that stay
        (config pins unless include_pinned, those moved within the cooldown)."""
        smp = balancer.Sample(workers=tuple(range(self.table.num_workers)))
        for w in s["workers"]:
            smp.worker_cpu[w["worker"]] = w.get("cpu_s_per_s", 0.0)
            for p in w["partitions"]:
                tp = (p["topic"], p["partition"])
                smp.partitions[tp] = balancer.PartitionRates(
                    p["bytes_in_per_s"] + p["bytes_out_per_s"], p.get("requests_per_s", 0.0))
                smp.owners[tp] = w["worker"]
        now = time.monotonic()
        frozen = {tp for tp, t in self.last_moved.items() if now - t < self.cooldown_s}
        if not include_pinned:
            frozen |= {tp for tp in smp.partitions if self.table.pinned(*tp) is not None}
        return smp, frozen

    def _decide(self, smp: balancer.Sample, frozen: set, threshold: float, max_moves: int) -> dict:
        loads = balancer.partition_loads(smp)
        before = balancer.worker_loads(loads, smp.owners, smp.workers)
        moves = balancer.plan(loads, smp.owners, smp.workers, threshold, frozen, max_moves)
        owners = dict(smp.owners)
        for tp, _, to in moves:
            owners[tp] = to
        after = balancer.worker_loads(loads, owners, smp.workers)
        return {"threshold": threshold, "imbalance_before": round(balancer.imbalance(before), 4),
                "imbalance_after_estimate": round(balancer.imbalance(after), 4),
                "load_before": {w: round(v, 4) for w, v in before.items()},
                "load_after_estimate": {w: round(v, 4) for w, v in after.items()},
                "moves": [{"topic": t, "partition": p, "from": f, "to": to}
                          for (t, p), f, to in moves]}

    async def balance(self, interval: float = 2.0, dry_run: bool = False,
                      max_moves: int = 64, include_pinned: bool = False,
                      threshold: float | None = None) -> dict:
        s = await self.sample(interval)
        smp, frozen = self._balance_input(s, include_pinned)
        out = self._decide(smp, frozen, self.threshold if threshold is None else threshold,
                           max_moves)
        out["pinned_kept"] = sorted(f"{t}-{p}" for t, p in smp.partitions
                                    if not include_pinned and self.table.pinned(t, p) is not None)
        if out["moves"] and not dry_run:
            async with self._lock:
                out["result"] = await self._move_many(
                    {(m["topic"], m["partition"]): m["to"] for m in out["moves"]},
                    reason="balance", decision=out)
        return out

    # ------------------------------------------------------------ continuous balancing
    def start_auto(self) -> None:
        if self.interval_s > 0 and self._auto is None and self.table.num_workers > 1:
            self._auto = asyncio.get_running_loop().create_task(self._auto_loop())
            log.info("placement: balancing every %g s above an imbalance of %g",
                     self.interval_s, self.threshold)

    async def _auto_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self.interval_s - AUTO_SAMPLE_MAX_S))
            try:
                await self.auto_step(min(self.interval_s, AUTO_SAMPLE_MAX_S))
            except asyncio.CancelledError:
                raise
            except Exception as e:       # a failed round must not end the balancer
                log.warning("placement: a balancing round failed: %s", e, exc_info=e)

    async def auto_step(self, sample_s: float) -> dict:
        """One round of the continuous balancer: sample, smooth, plan, move."""
        s = await self.sample(sample_s)
        smp, frozen = self._balance_input(s, include_pinned=False)
        out = self._decide(self.smoother.update(smp), frozen, self.threshold, 64)
        if out["moves"]:
            async with self._lock:
                out["result"] = await self._move_many(
                    {(m["topic"], m["partition"]): m["to"] for m in out["moves"]},
                    reason="auto", decision=out)
        return out

    # ------------------------------------------------------------ history
    def record(self, entries: list[dict]) -> None:
        """Append moves to the history file, keeping the newest HISTORY_KEEP lines."""
        if not entries:
            return
        try:
            os.makedirs(os.path.dirname(self.history_path), exist_ok=True)
            with open(self.history_path, "a") as f:
                for e in entries:
                    f.write(json.dumps(e) + "\n")
            with open(self.history_path) as f:
                lines = f.readlines()
            if len(lines) > 2 * HISTORY_KEEP:
                tmp = self.history_path + ".tmp"
                with open(tmp, "w") as f:
                    f.writelines(lines[-HISTORY_KEEP:])
                os.replace(tmp, self.history_path)
        except OSError as e:
            log.warning("placement history %s: %s", self.history_path, e)

    def history(self, limit: int = 100) -> list[dict]:
        try:
            with open(self.history_path) as f:
                lines = f.readlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines[-max(0, limit):] if limit else lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue        # a line cut by a crash
        return out

    # ------------------------------------------------------------ admin socket
    async def serve_admin(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("admin socket %s: %s", path, e)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.server = await asyncio.start_unix_server(self._client, unix_path(path))
            self.admin_path = path
        except OSError as e:
            log.error("cannot serve the admin socket %s: %s", path, e)

    async def _client(self, reader, writer) -> None:
        try:
            line = await reader.readline()
            req = json.loads(line or b"{}")
            cmd = req.get("cmd")
            try:
                if cmd == "show":
                    resp = {"ok": await self.show(float(req.get("interval", 1.0)))}
                elif cmd == "move":
                    resp = {"ok": await self.move(str(req["topic"]), int(req["partition"]),
                                                  int(req["worker"]),
                                                  bool(req.get("include_pinned")))}
                elif cmd == "balance":
                    thr = req.get("threshold")
                    resp = {"ok": await self.balance(float(req.get("interval", 2.0)),
                                                     bool(req.get("dry_run")),
                                                     int(req.get("max_moves", 64)),
                                                     bool(req.get("include_pinned")),
                                                     None if thr is None else float(thr))}
                elif cmd == "history":
                    resp = {"ok": self.history(int(req.get("limit", 100)))}
                elif cmd == "table":
                    resp = {"ok": self.table.to_json()}
                else:
                    resp = {"error": f"unknown command {cmd!r}"}
            except (ValueError, KeyError, TimeoutError) as e:
                resp = {"error": str(e)}
            writer.write(json.dumps(resp).encode() + b"\n")
            await writer.drain()
        except Exception:
            log.exception("admin request failed")
        finally:
            writer.close()

    def close(self) -> None:
        if self._auto is not None:
            self._auto.cancel()
        if self.server is not None:
            self.server.close()
            if self.admin_path:
                try:
                    os.unlink(self.admin_path)
                except OSError:
                    pass
