"""Client quotas (issue #17): does a byte-rate quota hold the rate, and what does the
accounting cost per request.

    .venv/bin/python -m loadtest.bench_quota [--rounds 3] [--quota 1000000] [--seconds 24]
                                             [--workers 1] [--window-num 11] [--calls 200000]

1. Micro: the dispatcher's quota hooks (workers/quotas.py `on_request` + `on_response`)
   per request, `--calls` calls, five repeats, median ns: with no quota stored (the
   fast path every broker pays) and with a produce quota on the client (recorded,
   not violated), for a Produce.
2. Rate: one broker (`--workers` workers, `quota.window.num=--window-num`), the default
   client-id quota (`/config/clients/<default>`) `producer_byte_rate` and
   `consumer_byte_rate` of `--quota` B/s, so every client id has its own rate and each
   round uses fresh ones. A confluent-kafka producer sends 1 KiB records as fast as it
   can for `--seconds`, then a consumer reads a topic filled beforehand for as long.
   Achieved = bytes acknowledged (consumed) / seconds. From a quiet start the quota
   allows quota * (seconds + (num - 1) * window) bytes (the rate is measured over at
   least num - 1 windows), so the round also prints achieved / that allowance: <= 1.0
   means the quota held. Then the medians. With several workers each enforces
   quota / num.workers and a client's one connection lands on one worker, so expect
   quota / num.workers (README "Quotas").
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from loadtest.peers import MpbrokerPeer, make_workdir


def micro(calls: int, repeats: int = 5) -> dict:
    from types import SimpleNamespace

    from mpbroker.protocol import api_keys
    from mpbroker.security import quotas as q
    from workers import quotas

    class Cfg(dict):
        num_workers = 1

    def broker(stored):
        b = SimpleNamespace(metadata=SimpleNamespace(client_quotas=stored))
        b.client_quotas = quotas.ClientQuotas(Cfg())
        return b
    ctx = SimpleNamespace(api_key=api_keys.PRODUCE, api_version=9, client_id="bench",
                          principal="User:ANONYMOUS", connection=None)
    cases = {"no quota stored": broker({}),
             "produce quota, not violated": broker(
                 {q.entity_key([("client-id", "bench")]): {q.PRODUCER_BYTE_RATE: 1e15}})}
    out = {}
    for name, b in cases.items():
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                ms = quotas.on_request(b, ctx, 1024, 0.00001)
                quotas.on_response(b, ctx, {}, {"throttle_time_ms": 0}, ms)
            runs.append((time.perf_counter() - t0) / calls * 1e9)
        out[name] = statistics.median(runs)
    return out


def alter(bootstrap: str, key: str, quota: float, client_id: str) -> None:
    from workers.kafka_client import KafkaConnection
    host, port = bootstrap.rsplit(":", 1)

    async def call():
        conn = await KafkaConnection.connect(host, int(port), timeout_ms=10000)
        try:
            resp = await conn.request(49, 1, {"validate_only": False, "entries": [{
                "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                "ops": [{"key": key, "value": float(quota), "remove": False}]}]})
            assert resp["entries"][0]["error_code"] == 0, resp
        finally:
            await conn.close()
    asyncio.run(call())


def produce_rate(bootstrap: str, topic: str, client_id: str, seconds: float) -> float:
    from confluent_kafka import Producer
    acked = [0]

    def done(err, msg):
        if err is None:
            acked[0] += len(msg.value())
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                  "queue.buffering.max.kbytes": 4096})
    payload = b"q" * 1024
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        try:
            p.produce(topic, payload, on_delivery=done)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.poll(0)
    end = (acked[0], time.monotonic())
    p.purge()
    p.flush(10)
    return end[0] / (end[1] - start)


def fill(bootstrap: str, topic: str, mb: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for _ in range(mb * 1024):
        while True:
            try:
                p.produce(topic, b"f" * 1024)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(60)


def fetch_rate(bootstrap: str, topic: str, client_id: str, seconds: float) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got += len(m.value())
    end = (got, time.monotonic())
    c.close()
    return end[0] / (end[1] - start)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quota", type=float, default=1_000_000, help="bytes/s")
    ap.add_argument("--seconds", type=float, default=24)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--window-num", type=int, default=11, help="quota.window.num")
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args(argv)

    print("== quota accounting per request (workers/quotas.py hooks) ==")
    for name, ns in micro(args.calls).items():
        print(f"  {name:30s} {ns:8.0f} ns")

    from confluent_kafka.admin import AdminClient, NewTopic
    peer = MpbrokerPeer(make_workdir("bench-quota"), {"num.workers": args.workers,
                                                      "quota.window.num": args.window_num})
    peer.start()
    try:
        fill_mb = int(args.quota * (args.seconds + args.window_num) / 1e6) + 4   # each round reads from 0
        a = AdminClient({"bootstrap.servers": peer.bootstrap})
        topics = ["quota-produce", "quota-fetch"]
        for f in a.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            f.result(30)
        fill(peer.bootstrap, "quota-fetch", fill_mb)       # before the <default> quota
        alter(peer.bootstrap, "producer_byte_rate", args.quota, None)     # <default> client id
        alter(peer.bootstrap, "consumer_byte_rate", args.quota, None)
        allowed = args.quota * (args.seconds + args.window_num - 1) / args.seconds
        print(f"== rate held: quota {args.quota:,.0f} B/s, {args.workers} worker(s), "
              f"{args.seconds:g} s a round ==")
        rates = {"produce": [], "fetch": []}
        for r in range(args.rounds):
            pr = produce_rate(peer.bootstrap, "quota-produce", f"bench-producer-{r}", args.seconds)
            fr = fetch_rate(peer.bootstrap, "quota-fetch", f"bench-consumer-{r}", args.seconds)
            rates["produce"].append(pr)
            rates["fetch"].append(fr)
            print(f"  round {r + 1}: produce {pr:12,.0f} B/s ({pr / args.quota:.2f}x quota, "
                  f"{pr / allowed:.2f}x allowed)   fetch {fr:12,.0f} B/s "
                  f"({fr / args.quota:.2f}x quota, {fr / allowed:.2f}x allowed)")
        for k, v in rates.items():
            m = statistics.median(v)
            print(f"  median {k:8s} {m:12,.0f} B/s = {m / args.quota:.2f}x the quota, "
                  f"{m / allowed:.2f}x what it allows in {args.seconds:g} s")
    finally:
        peer.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
