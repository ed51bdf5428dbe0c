"""Client quota enforcement on the front (issue #17: KIP-13, KIP-55, KIP-124, KIP-219).

`ClientQuotas` lives in each worker (`broker.client_quotas`) and is called by the
dispatcher (workers/dispatch.py) for every request a client sends to this worker:

* produce byte rate: the Produce request's size, recorded after the append (the handler
  ran first, as Kafka's KafkaApis does);
* fetch byte rate: the consumer Fetch response's record bytes; replica fetches are
  exempt. A consumer fetch asks for at most one quota window's bytes (`before_fetch`).
  A response that finds its client already over the quota (it did not wait its last
  throttle out), or whose request percentage is over, is answered empty (no records)
  with its throttle time and its bytes are not counted (Kafka's getThrottledResponse /
  unrecordQuotaSensor). Departure from Kafka: a response that only goes over the quota
  with its own bytes is sent with them and throttled after (as a Produce is), because
  a fetch returns at least one whole batch, and a batch bigger than the quota window
  (librdkafka's batches reach 1 MB) would otherwise never be delivered;
* request percentage (KIP-124): Kafka counts a request handler thread's time; a worker
  has one loop and no handler pool, so here the quota is a percentage of the worker
  loop's time, measured as the time the request's handler ran synchronously on it
  (decode, handler, encode; the awaited parts of a long poll or an acks=all wait do not
  count, as Kafka does not count purgatory time). 100 = one worker loop busy all the time.
  The controller-to-broker APIs are exempt, as Kafka exempts CLUSTER_ACTION requests.

The response's `throttle_time_ms` is the largest of the three. Then (KIP-219) a
request version whose client throttles itself is answered at once and the connection
is muted (not read) for the throttle time (`Connection.throttle`); an older version is
answered that much later (`CLIENT_THROTTLES_SINCE`), as Kafka does.

Across workers: each worker counts what its own connections send, against a
worker-local share of the quota, `quota / num.workers` (documented in README "Quotas"
and measured in loadtest/bench_quota.py). A client whose connections all land on one
worker therefore gets 1/num.workers of its quota; one spread over every worker gets
the whole. With `num.workers=1` the quota is exact. Kafka's ClientQuotaManager counts
per broker; a shared-memory table as workers/connection_quotas.py keeps for
connection counts would make it exact and is left for later.

Quotas come with the metadata the controller pushes (`md.client_quotas`); with none
stored the cost per request is one dict lookup.
"""
from __future__ import annotations

import time
from typing import Callable

from mpbroker.protocol import api_keys
from mpbroker.security import quotas as q
from workers.handlers.fetch.plan import records_size

# api key -> first version whose client honours throttle_time_ms itself (KIP-219,
# Kafka's AbstractResponse.shouldClientThrottle); APIs not listed: every version.
CLIENT_THROTTLES_SINCE = {
    0: 6, 1: 8, 2: 3, 3: 6, 8: 4, 9: 4, 10: 2, 11: 3, 12: 2, 13: 2, 14: 2, 15: 2, 16: 2,
    18: 2, 19: 3, 20: 2, 21: 1, 22: 1, 23: 3, 24: 1, 25: 1, 26: 1, 28: 1, 29: 1, 30: 1,
    31: 1, 32: 1, 33: 1, 34: 1, 35: 1, 36: 1, 37: 1, 38: 1, 39: 1, 40: 1, 41: 1, 42: 1,
}
# not counted against request_percentage (CLUSTER_ACTION APIs, as Kafka exempts them)
EXEMPT = frozenset({api_keys.LEADER_AND_ISR, api_keys.STOP_REPLICA, api_keys.UPDATE_METADATA,
                    api_keys.CONTROLLED_SHUTDOWN, api_keys.WRITE_TXN_MARKERS})
MAX_DELAY_MS = 30000      # an old client is never held longer than this


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def client_throttles(api_key: int, version: int) -> bool:
    return version >= CLIENT_THROTTLES_SINCE.get(api_key, 0)


class ClientQuotas:
    """One worker's quota sensors (mpbroker/security/quotas.py `Sensors`) per quota key."""

    def __init__(self, config, clock: Callable[[], int] = now_ms):
        self.clock = clock
        self.configure(config)

    RESOLVED_MAX = 10000        # cached resolutions before the cache starts afresh

    def configure(self, config) -> None:
        num = config.get("quota.window.num", 11)
        size = config.get("quota.window.size.seconds", 1)
        self.share = max(1, int(getattr(config, "num_workers", 1) or 1))
        self.sensors = {k: q.Sensors(num, size) for k in
                        (q.PRODUCER_BYTE_RATE, q.CONSUMER_BYTE_RATE, q.REQUEST_PERCENTAGE)}
        self._resolved: dict = {}       # (user, client id, key) -> (quota, metric key)
        self._resolved_of = None        # ... of this stored quotas dict (a new push: afresh)

    def resolve(self, stored, ctx, key: str) -> tuple:
        """(quota or None, metric key) of the request's entity, cached per metadata push."""
        if stored is not self._resolved_of or len(self._resolved) > self.RESOLVED_MAX:
            self._resolved, self._resolved_of = {}, stored
        user, client = self.entity(ctx)
        k = (user, client, key)
        hit = self._resolved.get(k)
        if hit is None:
            hit = self._resolved[k] = q.resolve(stored, user, client, key)
        return hit

    @staticmethod
    def entity(ctx) -> tuple:
        """(user, client id) of the request: the principal's name part (S1's
        `principal`, User:ANONYMOUS until authenticated) and the header's client id."""
        return (q.user_name(getattr(ctx, "principal", "User:ANONYMOUS")), ctx.client_id or "")

    def record(self, stored, ctx, key: str, value: float) -> int:
        """Count ``value`` for the request's entity under ``key``; its throttle ms (0
        when no quota of ``key`` applies)."""
        quota, metric = self.resolve(stored, ctx, key)
        if quota is None:
            return 0
        return self.sensors[key].record(metric, value, quota / self.share, self.clock())

    def throttle_ms(self, stored, ctx, key: str) -> int:
        """The entity's throttle time now, recording nothing."""
        quota, metric = self.resolve(stored, ctx, key)
        r = self.sensors[key].rates.get(metric) if quota is not None else None
        if r is None:
            return 0
        return q.throttle_time_ms(r, quota / self.share, self.clock(),
                                  self.sensors[key].max_throttle_ms)

    def unrecord(self, stored, ctx, key: str, value: float) -> None:
        quota, metric = self.resolve(stored, ctx, key)
        if quota is not None:
            r = self.sensors[key].rates.get(metric)
            if r is not None:
                r.record(-value, self.clock())


# ---------------------------------------------------------------- the dispatcher's hooks
def quotas_of(broker):
    """The stored client quotas, or None when there are none (the fast path)."""
    md = getattr(broker, "metadata", None)
    stored = getattr(md, "client_quotas", None) if md is not None else None
    return stored or None


def before_fetch(broker, ctx, request: dict) -> None:
    """A consumer Fetch asks for at most what its quota allows in one quota window
    (Kafka's getMaxValueInQuotaWindow: quota * (num - 1) * window), so a response is
    never too big to ever pass the quota."""
    stored = quotas_of(broker)
    if stored is None or request.get("replica_id", -1) >= 0 or _replica_state_id(request) >= 0:
        return
    cq = broker.client_quotas
    quota, _ = cq.resolve(stored, ctx, q.CONSUMER_BYTE_RATE)
    if quota is not None:
        s = cq.sensors[q.CONSUMER_BYTE_RATE]
        cap = max(1, int(quota / cq.share * (s.num - 1) * s.window_ms / 1000))
        request["max_bytes"] = min(int(request.get("max_bytes", cap) or cap), cap)


def on_request(broker, ctx, frame_size: int, handler_s: float) -> int:
    """After the handler ran: produce bytes and handler time; the throttle ms so far."""
    stored = quotas_of(broker)
    if stored is None:
        return 0
    cq = broker.client_quotas
    ms = 0
    if ctx.api_key == api_keys.PRODUCE:
        ms = cq.record(stored, ctx, q.PRODUCER_BYTE_RATE, frame_size)
    if ctx.api_key not in EXEMPT:
        ms = max(ms, cq.record(stored, ctx, q.REQUEST_PERCENTAGE, handler_s * 100.0))
    return ms


def on_response(broker, ctx, request, body: dict, throttle_ms: int) -> int:
    """Before the response is encoded: the consumer fetch bytes (a throttled fetch is
    answered without records, its bytes not counted); sets the response's
    throttle_time_ms and mutes the connection (KIP-219). The ms to delay the response
    by (old versions), else 0."""
    stored = quotas_of(broker)
    if stored is None:
        return 0
    if ctx.api_key == api_keys.FETCH and request.get("replica_id", -1) < 0 \
            and _replica_state_id(request) < 0:
        size = fetch_bytes(body)
        in_debt = broker.client_quotas.throttle_ms(stored, ctx, q.CONSUMER_BYTE_RATE) > 0
        fetch_ms = broker.client_quotas.record(stored, ctx, q.CONSUMER_BYTE_RATE, size)
        throttle_ms = max(throttle_ms, fetch_ms)
        if throttle_ms > 0 and size and (in_debt or fetch_ms < throttle_ms):
            broker.client_quotas.unrecord(stored, ctx, q.CONSUMER_BYTE_RATE, size)
            _drop_records(body)
    if throttle_ms <= 0:
        return 0
    body["throttle_time_ms"] = max(int(body.get("throttle_time_ms") or 0), throttle_ms)
    if client_throttles(ctx.api_key, ctx.api_version):
        mute(ctx, throttle_ms)
        return 0
    return min(throttle_ms, MAX_DELAY_MS)


def mute(ctx, throttle_ms: int) -> None:
    conn = ctx.connection
    if conn is not None and hasattr(conn, "throttle"):
        conn.throttle(throttle_ms)


def _replica_state_id(request) -> int:
    st = request.get("replica_state")
    return st.get("replica_id", -1) if isinstance(st, dict) else -1


def fetch_bytes(body: dict) -> int:
    total = 0
    for t in body.get("responses") or ():
        for p in t.get("partitions") or ():
            recs = p.get("records")
            if isinstance(recs, (bytes, bytearray, memoryview)):
                total += len(recs)
            else:
                total += records_size(recs)
    return total


def _drop_records(body: dict) -> None:
    for t in body.get("responses") or ():
        for p in t.get("partitions") or ():
            if p.get("records"):
                p["records"] = b""
