"""workers/quotas.py: the dispatcher's quota hooks on a fake clock: produce and fetch
byte rates, request percentage, KIP-219 mute vs. a delayed answer, the worker share."""
from mpbroker.protocol import api_keys as K
from mpbroker.security import quotas as q
from workers import quotas
from workers.quotas import ClientQuotas


class Cfg(dict):
    num_workers = 1


class Md:
    def __init__(self, stored):
        self.client_quotas = stored


class Broker:
    def __init__(self, stored, workers=1):
        cfg = Cfg({"quota.window.num": 11, "quota.window.size.seconds": 1})
        cfg.num_workers = workers
        self.now = [0]
        self.metadata = Md(stored)
        self.client_quotas = ClientQuotas(cfg, clock=lambda: self.now[0])


class Conn:
    def __init__(self):
        self.muted = []

    def throttle(self, ms):
        self.muted.append(ms)


class Ctx:
    def __init__(self, api_key, version, client_id="app", principal="User:ANONYMOUS"):
        self.api_key, self.api_version, self.client_id = api_key, version, client_id
        self.principal = principal
        self.connection = Conn()


def client(key, value, name="app"):
    return {q.entity_key([("client-id", name)]): {key: float(value)}}


def test_no_quotas_costs_nothing_and_changes_nothing():
    b = Broker({})
    ctx = Ctx(K.PRODUCE, 9)
    assert quotas.on_request(b, ctx, 10 ** 9, 10.0) == 0
    body = {"throttle_time_ms": 0}
    assert quotas.on_response(b, ctx, {}, body, 0) == 0 and body["throttle_time_ms"] == 0
    assert b.client_quotas.sensors[q.PRODUCER_BYTE_RATE].rates == {}


def test_produce_over_quota_is_answered_at_once_and_the_connection_muted():
    b = Broker(client(q.PRODUCER_BYTE_RATE, 1000))
    ctx = Ctx(K.PRODUCE, 9)
    assert quotas.on_request(b, ctx, 5000, 0.0) == 0                 # 5000 B / 10 s
    ms = quotas.on_request(b, ctx, 15000, 0.0)                       # 2000 B/s: 10 s
    assert ms == 10000
    body = {"throttle_time_ms": 0, "responses": []}
    assert quotas.on_response(b, ctx, {}, body, ms) == 0
    assert body["throttle_time_ms"] == 10000 and ctx.connection.muted == [10000]
    other = Ctx(K.PRODUCE, 9, client_id="other")                    # not this quota
    assert quotas.on_request(b, other, 10 ** 6, 0.0) == 0


def test_versions_before_kip_219_are_delayed_not_muted():
    b = Broker(client(q.PRODUCER_BYTE_RATE, 1000))
    ctx = Ctx(K.PRODUCE, 5)
    ms = quotas.on_request(b, ctx, 20000, 0.0)
    body = {"throttle_time_ms": 0, "responses": []}
    assert quotas.on_response(b, ctx, {}, body, ms) == ms > 0 and ctx.connection.muted == []


def test_fetch_over_quota_is_throttled_then_answered_empty_while_in_debt():
    b = Broker(client(q.CONSUMER_BYTE_RATE, 100))
    ctx = Ctx(K.FETCH, 12)

    def body(n):
        return {"throttle_time_ms": 0, "responses": [
            {"partitions": [{"records": b"x" * n}, {"records": [b"y" * n]}]}]}
    first = body(400)                                        # 800 B / 10 s: within 100/s
    assert quotas.on_response(b, ctx, {"replica_id": -1}, first, 0) == 0
    assert first["throttle_time_ms"] == 0 and first["responses"][0]["partitions"][0]["records"]
    # over the quota with its own bytes: sent, and throttled after (as a produce)
    second = body(400)                                       # 1600 B / 10 s: over
    assert quotas.on_response(b, ctx, {"replica_id": -1}, second, 0) == 0
    assert second["throttle_time_ms"] > 0 and ctx.connection.muted
    assert second["responses"][0]["partitions"][0]["records"]
    # a client still in debt gets no records, and they are not counted
    third = body(400)
    assert quotas.on_response(b, ctx, {"replica_id": -1}, third, 0) == 0
    assert third["throttle_time_ms"] > 0
    assert [p["records"] for p in third["responses"][0]["partitions"]] == [b"", b""]
    rate = b.client_quotas.sensors[q.CONSUMER_BYTE_RATE].rates[("", "app")]
    assert sum(rate.values) == 1600
    # a request percentage violation empties the response too
    fourth = body(1)
    b.now[0] = 10 ** 6                                       # the fetch debt is long gone
    assert quotas.on_response(b, ctx, {"replica_id": -1}, fourth, 500) == 0
    assert fourth["throttle_time_ms"] == 500
    assert fourth["responses"][0]["partitions"][0]["records"] == b""


def test_replica_fetches_are_exempt():
    b = Broker(client(q.CONSUMER_BYTE_RATE, 1))
    body = {"throttle_time_ms": 0, "responses": [{"partitions": [{"records": b"x" * 10 ** 6}]}]}
    assert quotas.on_response(b, Ctx(K.FETCH, 12), {"replica_id": 2}, body, 0) == 0
    assert body["throttle_time_ms"] == 0


def test_request_percentage_counts_handler_time_except_cluster_actions():
    b = Broker(client(q.REQUEST_PERCENTAGE, 10))             # 10 % of the loop
    ctx = Ctx(K.METADATA, 12)
    assert quotas.on_request(b, ctx, 100, 0.5) == 0          # 50 %-s over 10 s: 5 %
    assert quotas.on_request(b, ctx, 100, 1.0) == 5000       # 15 %: (15-10)/10 * 10 s
    assert quotas.on_request(b, Ctx(K.LEADER_AND_ISR, 7), 100, 100.0) == 0


def test_each_worker_enforces_its_share():
    b = Broker(client(q.PRODUCER_BYTE_RATE, 1000), workers=4)   # 250 B/s here
    ctx = Ctx(K.PRODUCE, 9)
    assert quotas.on_request(b, ctx, 2500, 0.0) == 0
    assert quotas.on_request(b, ctx, 2500, 0.0) == 10000     # 500 B/s: (500-250)/250 * 10 s


def test_user_quotas_use_the_principal():
    b = Broker({q.entity_key([("user", "alice")]): {q.PRODUCER_BYTE_RATE: 100.0}})
    assert quotas.on_request(b, Ctx(K.PRODUCE, 9, principal="User:alice"), 5000, 0.0) > 0
    assert quotas.on_request(b, Ctx(K.PRODUCE, 9), 5000, 0.0) == 0


def test_a_consumer_fetch_asks_for_at_most_one_quota_window():
    b = Broker(client(q.CONSUMER_BYTE_RATE, 1000))
    req = {"replica_id": -1, "max_bytes": 50 << 20}
    quotas.before_fetch(b, Ctx(K.FETCH, 12), req)
    assert req["max_bytes"] == 1000 * 10                     # quota * (num - 1) windows
    replica = {"replica_id": 1, "max_bytes": 50 << 20}
    quotas.before_fetch(b, Ctx(K.FETCH, 12), replica)
    assert replica["max_bytes"] == 50 << 20
