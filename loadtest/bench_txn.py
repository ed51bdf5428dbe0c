"""Transactional vs plain idempotent produce throughput on mpbroker, with confluent-kafka.

    .venv/bin/python -m loadtest.bench_txn [--rounds 3] [--messages 20000] [--size 200]
                                           [--txn-size 1000] [--partitions 3]
                                           [--bootstrap host:port]

One broker (started here with default settings, so num.workers = the CPU count and the
transaction coordinator, the partitions and the front usually sit on different
workers; or an already running one with --bootstrap). Each round runs both modes, in
alternating order so that drift of the machine hits both:

* idempotent: enable.idempotence=true (acks=all), `--messages` records to a fresh
  `--partitions`-partition topic, then flush;
* transactional: the same volume with transactional.id, in transactions of
  `--txn-size` records (begin, produce, commit_transaction, which waits for EndTxn),
  so each transaction pays AddPartitionsToTxn, the KIP-890 verification of its first
  batch per partition, EndTxn and the markers.

Printed: every round's msgs/s, the medians, and the ratio transactional/idempotent of
the medians. Bounded: a fixed volume per measurement and a deadline on every loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from loadtest.peers import MpbrokerPeer, create_topic, delete_topic, make_workdir

MEASURE_TIMEOUT_S = 120.0


def conf(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
            "enable.idempotence": True, "acks": "all", "compression.type": "none",
            "message.timeout.ms": int(MEASURE_TIMEOUT_S * 1000)}


def _produce(p, topic: str, payload: bytes, deadline: float, what: str) -> None:
    """One record, waiting (polling) while librdkafka's queue is full, until `deadline`."""
    while True:
        try:
            p.produce(topic, payload)
            return
        except BufferError:
            p.poll(0.01)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} produce did not drain")


def run_idempotent(bootstrap: str, topic: str, n: int, payload: bytes) -> float:
    from confluent_kafka import Producer
    p = Producer(conf(bootstrap))
    p.produce(topic, payload)         # connection, metadata and producer id off the clock
    p.flush(30)
    start = time.perf_counter()
    deadline = time.monotonic() + MEASURE_TIMEOUT_S
    for _ in range(n):
        _produce(p, topic, payload, deadline, "idempotent")
    if p.flush(MEASURE_TIMEOUT_S) != 0:
        raise TimeoutError("idempotent flush timed out")
    return n / (time.perf_counter() - start)


def run_transactional(bootstrap: str, topic: str, n: int, payload: bytes, txn_size: int) -> float:
    from confluent_kafka import Producer
    p = Producer({**conf(bootstrap), "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "transaction.timeout.ms": int(MEASURE_TIMEOUT_S * 1000)})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, payload)
    p.commit_transaction(30)
    start = time.perf_counter()
    deadline = time.monotonic() + MEASURE_TIMEOUT_S
    sent = 0
    while sent < n:
        p.begin_transaction()
        for _ in range(min(txn_size, n - sent)):
            _produce(p, topic, payload, deadline, "transactional")
            sent += 1
        p.commit_transaction(MEASURE_TIMEOUT_S)
    return n / (time.perf_counter() - start)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--txn-size", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--bootstrap", default=None)
    args = ap.parse_args(argv)
    payload = b"x" * args.size
    peer = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        peer = MpbrokerPeer(make_workdir("bench-txn"))
        peer.start()
        bootstrap = peer.bootstrap
    try:
        res = {"idempotent": [], "transactional": []}
        for r in range(args.rounds):
            order = ["idempotent", "transactional"]
            if r % 2:
                order.reverse()
            for mode in order:
                topic = f"bench-txn-{mode}-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic, args.partitions)
                try:
                    if mode == "idempotent":
                        rate = run_idempotent(bootstrap, topic, args.messages, payload)
                    else:
                        rate = run_transactional(bootstrap, topic, args.messages, payload,
                                                 args.txn_size)
                finally:
                    delete_topic(bootstrap, topic)
                res[mode].append(rate)
                print(f"round {r + 1} {mode:>13}: {rate:10.0f} msgs/s", flush=True)
        med = {m: statistics.median(v) for m, v in res.items()}
        print(f"\n{args.messages} x {args.size} B records, {args.partitions} partitions, "
              f"transactions of {args.txn_size}, {args.rounds} rounds")
        for m, v in med.items():
            print(f"median {m:>13}: {v:10.0f} msgs/s")
        print(f"ratio transactional/idempotent: {med['transactional'] / med['idempotent']:.2f}")
    finally:
        if peer is not None:
            peer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
