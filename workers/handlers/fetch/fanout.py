"""The front's side of a Fetch split across workers (ARCHITECTURE §2; the router calls
`fan_out` for Fetch, its partition scope in the registry).

The front keeps the incremental fetch session (KIP-227) and resolves which partitions
the request reads. It reads its own partitions itself. Of the other workers'
partitions, a consumer's that it is caught up on are answered from what their owners
published (workers/partition_states.py: no records, the published offsets); those
whose new batches the published state locates and that fit the owner's share of
`max_bytes` are *read here* from the owner's active segment (`RemoteStates.read`: a
FileSlice pinned to this connection, as an owner's answer would be); the rest
are *asked*: forwarded to their owners as sessionless Fetch requests that answer at
once (session_epoch -1, max_wait_ms 0, `router.fetch_subrequest`) with a share of
`max_bytes`, which subscribes the front to their state. Owners answer FileSlices with
fd=-1; each answer's slices are pinned to this connection's handles as it arrives
(`pin_records`, workers/payloads.py).

Long polling happens on the front alone: when nothing read, asked or published has
news, the Fetch parks in this worker's fetch purgatory watching every partition it
reads (`DelayedFanout`), its own partitions as any DelayedFetch counts them and the
other workers' through their published state (an owner's "state" message checks the
keys it names). It parks right after the pass that found nothing, from that pass's
counters. On completion or expiry the front passes again over the partitions whose
state is no longer what the first pass answered (a consumer's others keep their
caught-up answers; a follower or a fetcher before v10 passes over all of them): its
own, the published state of the others (and their files, where it says where), and
asks the owners of the partitions that have news it cannot read. A
caught-up long poll thus costs the front only, and a wake-up at most one answer from
the owner whose partition changed (not one from each worker).

Followers (replica_id >= 0) are asked every time: their fetch offset is what moves the
owner's high watermark. An owner that is gone has its part read here (this worker
does not own those partitions: NOT_LEADER_OR_FOLLOWER).
"""
from __future__ import annotations

import asyncio

from storage import convert
from workers.delayed import DelayedFetch
from workers.handlers.fetch.memo import drop, resolve
from workers.handlers.fetch.plan import FetchPlan, PartPlan, records_size, replica_id, serve
from workers.payloads import pin_records
from workers.router import PeerGone, fetch_subrequest


def fan_out(router, ctx, req, handle):
    """Fetch across workers: the answer now, or an awaitable of it. A Fetch whose
    partitions are all this worker's is served here from the partitions resolved for
    placing it (`plan.serve`, what the registry's handler runs), so `handle` is not
    called: its failures, now or later, are the dispatcher's to answer, as with one
    worker."""
    broker = router.broker
    version = ctx.api_version
    requested, forgotten, unknown_ids, memo = resolve(broker, ctx, req)
    try:
        reads = [(cp.topic, cp.partition) for cp in requested]
        epoch = req.get("session_epoch", -1)
        if epoch > 0:
            s = broker.fetch_sessions.sessions.get(req.get("session_id", 0))
            if s is not None:
                reads.extend(s.partitions)
        # counted for placement balancing, and placed (an incremental Fetch's partitions
        # change from one request to the next: not remembered)
        placed = router.placed(reads, remember=epoch <= 0)
        conn = ctx.connection
        may_move = conn is not None and conn.on_move is not None
        if may_move:
            # a connection that moves to the owner of what it reads (workers/handoff.py):
            # its consumer Fetches that read one other worker's partitions count (an
            # incremental one's are its session's: `reads`)
            if placed.sole is not None and replica_id(req) < 0:
                conn.fetched_from(placed.sole, reads)
            else:
                conn.move_streak = 0
        if placed.mine:
            return serve(broker, ctx, req, requested, forgotten, unknown_ids, memo)
    except BaseException:       # the dispatcher answers the failure; the memo goes
        drop(ctx, memo)
        raise
    drop(ctx, memo)         # served by parts: the memo would not follow what it answers
    fctx = broker.fetch_sessions.new_context(req.get("session_id", 0), epoch,
                                             requested, forgotten,
                                             is_follower=replica_id(req) >= 0,
                                             uses_topic_ids=version >= 13)
    if may_move:
        conn.move_session = fctx.session_id         # (0: none) it goes with a move
    if fctx.error_code:
        return {"throttle_time_ms": 0, "error_code": fctx.error_code, "session_id": 0,
                "responses": []}
    return Fanout(router, ctx, req, FetchPlan(broker, ctx, req, fctx, unknown_ids),
                  placed.owners).run()


class Fanout:
    """One Fetch split across workers (module docstring): `run` answers it."""

    def __init__(self, router, ctx, req, plan: FetchPlan, owners: dict):
        self.router = router
        self.broker = router.broker
        self.ctx = ctx
        self.req = req
        self.plan = plan
        self.committed = plan.isolation_level == 1
        # a consumer of v10+ may be answered from published state (older fetchers of a
        # zstd topic get an error that only the owner's read tells)
        self.from_state = (plan.replica_id < 0
                           and ctx.api_version >= convert.ZSTD_MIN_FETCH_VERSION)
        self._split(owners)
        # while the owners answer as now, the split stays right: a woken park keeps it
        # (a re-split looks up every partition's owner again)
        self._split_at = router.owners_token()
        self.news = bool(plan.unknown_ids)
        # what each partition's counters were when it was read or found quiet, and the
        # bytes read: where a park counts from (what arrives after the read wakes it)
        self.start: dict[tuple, tuple] = {}
        self.found_bytes = 0

    def _split(self, owners: dict) -> None:
        """This worker's partitions (`local`) and the others' by owner (`remote`)."""
        router, me = self.router, self.router.me
        self.local: list = []
        self.remote: dict[int, list] = {}
        for cp in self.plan.fctx.partitions:
            w = owners.get((cp.topic, cp.partition))
            if w is None:
                w = router.owner(cp.topic, cp.partition)
            if w == me:
                self.local.append(cp)
            else:
                self.remote.setdefault(w, []).append(cp)

    def run(self):
        found: dict[tuple, dict] = {}
        asks = self._pass(found)
        if asks:
            return self._answer_asked(found, self._ask(found, asks))
        if self.news or self.plan.max_wait_ms <= 0 or not self.plan.fctx.partitions:
            return self._assemble(found)
        # parked now, right after the pass took its counters (nothing ran since). When
        # it found no records, a consumer's answers are all caught-up ones, kept on
        # wake-up while their state stays the same; records found (below min_bytes)
        # are read again, and so is everything for a follower (its own fetch moves the
        # high watermark: what woke it are bytes its answer does not have yet) or an
        # old fetcher (FetchPlan.read_again's rule)
        keep = self.from_state and not self.found_bytes
        return self._answer_parked(self._park(check=False), found if keep else None)

    def _pass(self, found: dict, local: list | None = None,
              remote: dict | None = None) -> dict[int, list]:
        """Read this worker's partitions (`local`, default all) and answer the others'
        quiet ones (`remote`, {owner: [CachedPartition]}, default all) into `found`;
        the others' {owner: [CachedPartition]} to ask. Sets `news`."""
        plan, committed, start = self.plan, self.committed, self.start
        local = self.local if local is None else local
        remote = self.remote if remote is None else remote
        asks: dict[int, list] = {}
        # {key: (owner, bytes)} read here from the owners' files: told to them as their
        # bytes out once the answer is assembled from this pass
        self.read_here = read_here = {}
        read_total = 0
        if self.from_state:
            states = self.router.states
            quiet, read = states.quiet, states.read
            # what an owner would be given if asked (an upper bound: fewer may be asked)
            share = max(1, plan.max_bytes // max(1, len(remote) + bool(local)))
            for w, cps in remote.items():
                used = 0
                for cp in cps:
                    key = (cp.topic, cp.partition)
                    st = quiet(cp, w, committed)
                    if st is None:
                        got = read(cp, w, committed, min(cp.max_bytes, share - used))
                        sl = None if got is None else self._pin(got[1])
                        if sl is None:
                            asks.setdefault(w, []).append(cp)
                            continue
                        st = got[0]
                        found[key] = st.answer(cp.partition, committed, [sl])
                        used += sl.length
                        read_here[key] = (w, sl.length)
                    else:
                        found[key] = st.answer(cp.partition, committed)
                    start[key] = (st.bytes_appended, st.bytes_committed,
                                  st.last_stable_offset)
                read_total += used
            self.found_bytes += read_total
        else:
            asks = {w: list(cps) for w, cps in remote.items()}
        # what is left of max_bytes, shared by the asked owners and this worker's read
        self.budget = max(1, (plan.max_bytes - read_total)
                          // max(1, len(asks) + bool(local)))
        if local:
            looked: list = []       # the Partitions read, counted from as they are
            results, total, error = PartPlan(self.broker, self.ctx, self._part_req(),
                                             local).read_all(looked=looked)
            for (cp, data), p in zip(results, looked):
                key = (cp.topic, cp.partition)
                found[key] = data
                if p is not None:
                    start[key] = (p.bytes_appended, p.bytes_committed, p.last_stable_offset)
            self.found_bytes += total
            if error:
                self.news = True
        if self.found_bytes >= plan.min_bytes:
            self.news = True
        return asks

    def _pin(self, sl):
        """`sl` (another worker's file) with an fd of the client's connection; None
        when that file is gone or replaced (the owner is asked instead)."""
        conn = self.ctx.connection
        return sl if conn is None else conn.pin(sl)

    def _part_req(self) -> dict:
        return {**self.req, "max_bytes": self.budget}

    def _read_here(self, cps) -> list:
        return PartPlan(self.broker, self.ctx, self._part_req(), cps).read_all()[0]

    def _ask(self, found: dict, asks: dict) -> list:
        """Ask each owner for its partitions in `asks` (answering at once); the
        [(future, cps)] of the answers (`_collect`). An owner that cannot be reached
        has its partitions read here into `found`."""
        router, ctx, plan = self.router, self.ctx, self.plan
        waiting = []
        for w, cps in asks.items():
            sub = fetch_subrequest(self.req, ctx.api_version, cps, self.budget, plan.min_bytes)
            fut = router.forward(w, ctx, sub, sub_keys=[(cp.topic, cp.partition) for cp in cps])
            if fut is None:
                self._collect_here(found, cps)
            else:
                waiting.append((fut, cps))
        return waiting

    async def _collect(self, found: dict, waiting: list) -> None:
        """The owners' answers into `found` (an owner gone: its partitions read here)."""
        version, start = self.ctx.api_version, self.start
        for fut, cps in waiting:
            try:
                body = await fut
            except PeerGone:
                self._collect_here(found, cps)
                continue
            for topic, index, st in getattr(fut, "state", None) or ():
                if st is not None:      # the counters the part was read at
                    start[(topic, index)] = (st[4], st[5], st[1])
            if body.get("error_code"):
                self.news = True
            for data in collect(self.broker, body, version, found, self.ctx.connection):
                if data["error_code"] or "diverging_epoch" in data:
                    self.news = True
                self.found_bytes += records_size(data["records"])
        if self.found_bytes >= self.plan.min_bytes:
            self.news = True

    def _collect_here(self, found: dict, cps) -> None:
        self.news = True
        for cp, data in self._read_here(cps):
            found[(cp.topic, cp.partition)] = data

    async def _answer_asked(self, found: dict, waiting: list):
        await self._collect(found, waiting)
        if not self.news and self.plan.max_wait_ms > 0:
            # the owners' answers came meanwhile: what changed since is counted at once
            return await self._answer_parked(self._park(check=True), None)
        return self._assemble(found)

    def _park(self, check: bool) -> asyncio.Future:
        """Park in the fetch purgatory, counting from the pass's counters (`start`);
        the future resolves on completion or expiry. `check`: count what changed since
        they were taken (False right after the pass: nothing can have, unless a
        partition is already gone)."""
        self.remote_keys = {(cp.topic, cp.partition) for cps in self.remote.values()
                            for cp in cps}
        future = asyncio.get_running_loop().create_future()
        op = DelayedFanout(self.plan, future, self._lookup, self.start, self.found_bytes)
        self.broker.fetch_purgatory.try_complete_else_watch(op, list(op.start_bytes),
                                                            check=check or op.gone)
        return future

    async def _answer_parked(self, future: asyncio.Future, found: dict | None):
        """The answer after a park: a pass over the partitions whose state is no longer
        what `found` (the caught-up answers the park followed; None: unknown) answered,
        or over every partition when owners may have changed meanwhile."""
        await future
        if not self.router.owners_same(self._split_at):
            self._split({})         # owners may have changed meanwhile
            found = None
        if found is None:
            found = {}
            asks = self._pass(found)
        else:
            asks = self._pass(found, *self._changed(found))
        if asks:
            await self._collect(found, self._ask(found, asks))
        return self._assemble(found)

    def _changed(self, found: dict) -> tuple[list, dict]:
        """The partitions whose answer in `found` (a caught-up one) a read now would
        not give: this worker's, and the others' by owner (read, answered or asked
        again by the pass); their answers leave `found`, the others' stay."""
        partition, states = self.broker.partition, self.router.states
        local: list = []
        remote: dict[int, list] = {}
        # FetchPlan.read_again's rule, inline: these loops run over every partition
        for cp in self.local:
            key = (cp.topic, cp.partition)
            data = found.get(key)
            p = partition(*key)
            if data is not None and p is not None:
                lg = p.log
                epoch = cp.current_leader_epoch
                if (lg.high_watermark == data["high_watermark"]
                        and lg.last_stable_offset == data["last_stable_offset"]
                        and lg.log_start_offset == data["log_start_offset"]
                        and (epoch < 0 or epoch == p.leader_epoch)):
                    continue
            found.pop(key, None)
            local.append(cp)
        for w, cps in self.remote.items():
            for cp in cps:
                key = (cp.topic, cp.partition)
                data = found.get(key)
                st = states.get(key)
                if data is not None and st is not None and st.owner == w:
                    epoch = cp.current_leader_epoch
                    if (st.high_watermark == data["high_watermark"]
                            and st.last_stable_offset == data["last_stable_offset"]
                            and st.log_start_offset == data["log_start_offset"]
                            and (epoch < 0 or epoch == st.leader_epoch)):
                        states.used.add(key)        # read by a Fetch: kept in the copy
                        continue
                found.pop(key, None)
                remote.setdefault(w, []).append(cp)
        return local, remote

    def _lookup(self, topic: str, index: int):
        """A partition of this worker, or another worker's as its owner published it."""
        key = (topic, index)
        if key in self.remote_keys:
            return self.router.states.get(key)
        return self.broker.partition(topic, index)

    def _assemble(self, found: dict) -> dict:
        count = self.router.states.count_served
        for key, (owner, n) in self.read_here.items():
            count(owner, key, n)
        results = []
        for cp in self.plan.fctx.partitions:
            data = found.get((cp.topic, cp.partition))
            if data is None:        # no answer for it (an owner's failed part)
                data = self._read_here([cp])[0][1]
            results.append((cp, data))
        return self.plan.response(results)


class DelayedFanout(DelayedFetch):
    """The front's long poll of a Fetch across workers: counts like DelayedFetch, with
    the other workers' partitions through their published state (`lookup`); completion
    or expiry resolves `future` (the front then reads again)."""

    def on_complete(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result(None)
        # as DelayedFetch: a completed op keeps nothing of its Fetch
        self.start_bytes, self.start_lso, self.counted = {}, {}, {}
        self.future = self.lookup = self.plan = None


def collect(broker, body: dict, version: int, found: dict, conn=None) -> list:
    """An owner's answer into `found` ((topic, partition) -> partition dict), each
    partition's FileSlices pinned to `conn` (`pin_records`); the partition dicts."""
    out = []
    for t in body.get("responses") or ():
        if version >= 13:
            name = broker.topic_name_for_id(t.get("topic_id"))
        else:
            name = t.get("topic")
        for p in t.get("partitions") or ():
            data = found[(name, p["partition_index"])] = pin_records(p, conn)
            out.append(data)
    return out
