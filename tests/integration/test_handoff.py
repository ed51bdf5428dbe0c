"""Connection hand-off (workers/handoff.py) on a real two-worker broker with real
confluent-kafka consumers: a consumer whose partitions are all one worker's ends up
served by that worker, whichever worker the kernel gave its connection to, and reads
every record, in order, byte for byte, across the move; a kafka-python consumer's
incremental fetch session moves with it; producers of a one-partition topic move to
its owner and lose nothing. With
`worker.connection.handoff=false` connections stay where they landed.

Connections land on the workers by hash (SO_REUSEPORT), so each test opens several
consumers: each one's Fetch connection lands on the worker that does not own its
partitions with probability 1/2, so with CONSUMERS of them one does but once in 2^12.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.integration import broker as h
from tests.integration.test_metrics import scrape, series
from tests.integration.test_multiworker import owners, show, two_workers  # noqa: F401

pytestmark = pytest.mark.skipif(h.external_bootstrap() is not None,
                                reason="needs our own multi-worker broker process")

CONSUMERS = 12


def _per_worker(port: int, name: str) -> dict[str, float]:
    return {dict(lbl)["worker"]: v for lbl, v in series(scrape(port), name).items()}


class _Tail:
    """One consumer assigned `parts` from offset 0, polled by its own thread."""

    def __init__(self, b, topic: str, parts: list[int], wait_ms: int):
        from confluent_kafka import Consumer, TopicPartition
        cid = f"ho-{uuid.uuid4().hex[:8]}"
        self.c = Consumer({**h.common_conf(b.bootstrap), "group.id": cid, "client.id": cid,
                           "enable.auto.commit": False, "fetch.wait.max.ms": wait_ms,
                           "fetch.min.bytes": 1})
        self.c.assign([TopicPartition(topic, p, 0) for p in parts])
        self.got: dict[int, list[bytes]] = {p: [] for p in parts}
        self.errors: list = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._poll, daemon=True)
        self.t.start()

    def _poll(self):
        while not self.stop.is_set():
            m = self.c.poll(0.05)
            if m is None:
                continue
            if m.error() is not None:
                self.errors.append(m.error())
                continue
            self.got[m.partition()].append(m.value())

    def close(self):
        self.stop.set()
        self.t.join(10)
        self.c.close()


class _KpTail(_Tail):
    """The same with kafka-python, whose Fetches use incremental fetch sessions (KIP-227):
    its session moves with its connection."""

    def __init__(self, b, topic: str, parts: list[int], wait_ms: int):
        from kafka import KafkaConsumer, TopicPartition
        self.c = KafkaConsumer(bootstrap_servers=b.bootstrap, client_id=f"ho-kp-{uuid.uuid4().hex[:8]}",
                               group_id=None, enable_auto_commit=False,
                               auto_offset_reset="earliest", fetch_max_wait_ms=wait_ms,
                               request_timeout_ms=30000)
        self.c.assign([TopicPartition(topic, p) for p in parts])
        self.c.seek_to_beginning()
        self.got = {p: [] for p in parts}
        self.errors = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._poll, daemon=True)
        self.t.start()

    def _poll(self):
        while not self.stop.is_set():
            try:
                for tp, records in self.c.poll(timeout_ms=50).items():
                    self.got[tp.partition].extend(r.value for r in records)
            except Exception as e:          # noqa: BLE001 - reported by the test
                self.errors.append(e)


def _run(b, kind=_Tail, wait_ms: int = 200):
    """A topic of 4 partitions, CONSUMERS of `kind` tailing those of worker `w`;
    returns (topic, w, its partitions, tails)."""
    topic = h.create_topic(b.bootstrap, f"ho-{uuid.uuid4().hex[:8]}", 4)
    own = owners(show(b), topic)
    w = own[0]
    parts = sorted(p for p, o in own.items() if o == w)
    tails = [kind(b, topic, parts, wait_ms) for _ in range(CONSUMERS)]
    return topic, w, parts, tails


@pytest.mark.parametrize("kind", [_Tail, _KpTail], ids=["confluent-kafka", "kafka-python"])
def test_consumers_move_to_the_owner_of_their_partitions_and_read_everything(two_workers, kind):  # noqa: F811
    metrics_port = h.free_port()
    b = two_workers({"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    topic, w, parts, tails = _run(b, kind)
    other = str(1 - w)
    try:
        # consumers on the other worker hand their connection to `w` after a few
        # Fetches (3, each at most fetch.wait.max.ms on an empty topic)
        h.wait_until(lambda: _per_worker(metrics_port, "mpbroker_worker_connections_handed_over_total")
                     .get(other, 0) >= 1, 30, "a connection handed over", b)
        p = h.producer(b.bootstrap, **{"linger.ms": 0})
        sent: dict[int, list[bytes]] = {q: [] for q in parts}
        for i in range(400):
            q = parts[i % len(parts)]
            v = f"{q}:{i}:".encode() + bytes([i % 251]) * (i % 300)
            p.produce(topic, v, partition=q)
            sent[q].append(v)
            if i % 50 == 0:
                h.flush(p)
        h.flush(p)

        def all_read():
            return all(len(t.got[q]) >= len(sent[q]) for t in tails for q in parts)
        h.wait_until(all_read, 60, "every consumer to read every record", b)
        for t in tails:
            assert not t.errors
            assert t.got == sent            # in order, byte for byte, nothing twice
        # every Fetch connection is the owner's now: the other worker parks none
        # (long polls of 200 ms: a parked Fetch shows within a few polls)
        def settled():
            ws = {x["worker"]: x for x in show(b, 0.05)["workers"]}
            return ws[w]["purgatory"]["fetch"] >= 1 and ws[1 - w]["purgatory"]["fetch"] == 0
        h.wait_until(settled, 20, "the long polls parked on the owner only", b)
        if kind is _KpTail:         # the sessions went with the connections
            ws = {x["worker"]: x for x in show(b, 0.05)["workers"]}
            assert ws[1 - w]["fetch_sessions"] == 0 and ws[w]["fetch_sessions"] == CONSUMERS
        handed = _per_worker(metrics_port, "mpbroker_worker_connections_handed_over_total")
        taken = _per_worker(metrics_port, "mpbroker_worker_connections_taken_over_total")
        assert handed.get(str(w), 0) == 0 and taken.get(other, 0) == 0
        assert handed[other] == taken[str(w)] >= 1
        assert handed[other] <= CONSUMERS   # each moved once, not back and forth
    finally:
        for t in tails:
            t.close()


def test_connections_stay_where_they_landed_when_handoff_is_off(two_workers):  # noqa: F811
    metrics_port = h.free_port()
    b = two_workers({"metrics.listener": f"http://127.0.0.1:{metrics_port}",
                     "worker.connection.handoff": "false"})
    topic, w, parts, tails = _run(b)
    try:
        # consumers on the other worker park their long polls there, and keep doing so
        def parked_on_both():
            ws = {x["worker"]: x["purgatory"]["fetch"] for x in show(b, 0.05)["workers"]}
            return all(n >= 1 for n in ws.values())
        h.wait_until(parked_on_both, 30, "long polls parked on both workers", b)
        # many Fetches later (each consumer's streak far past a move's), still so
        def fetches():
            return sum(series(scrape(metrics_port), "kafka_network_requestmetrics_requests_total",
                              request="Fetch").values())
        before = fetches()
        h.wait_until(lambda: fetches() >= before + 10 * CONSUMERS, 30,
                     "ten more Fetches per consumer", b)
        h.wait_until(parked_on_both, 10, "long polls still parked on both workers", b)
        handed = _per_worker(metrics_port, "mpbroker_worker_connections_handed_over_total")
        assert sum(handed.values()) == 0
    finally:
        for t in tails:
            t.close()


def test_producers_to_one_workers_partition_move_there_and_lose_nothing(two_workers):  # noqa: F811
    """Producers of a one-partition topic: those that landed on the other worker are
    handed to the owner after 24 requests (one or a few records each: linger.ms=0, up
    to 3 in flight, idempotent), and every record is stored once, in each producer's
    order, across the move."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    metrics_port = h.free_port()
    b = two_workers({"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    topic = h.create_topic(b.bootstrap, f"hop-{uuid.uuid4().hex[:8]}", 1)
    w = owners(show(b), topic)[0]
    producers = [Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0,
                           "enable.idempotence": True, "max.in.flight": 5,
                           "client.id": f"hop-{k}"})
                 for k in range(CONSUMERS)]
    sent = {k: [f"{k}:{i}".encode() for i in range(90)] for k in range(CONSUMERS)}
    for i in range(90):
        for k, p in enumerate(producers):
            p.produce(topic, sent[k][i], partition=0)
            p.poll(0)
        if i % 3 == 2:                  # pipelined between flushes
            for p in producers:
                assert p.flush(30) == 0
    handed = _per_worker(metrics_port, "mpbroker_worker_connections_handed_over_total")
    taken = _per_worker(metrics_port, "mpbroker_worker_connections_taken_over_total")
    assert handed.get(str(w), 0) == 0 and handed.get(str(1 - w), 0) >= 1
    assert taken.get(str(w), 0) == handed[str(1 - w)]
    c = Consumer({**h.common_conf(b.bootstrap), "group.id": f"hop-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: dict[int, list[bytes]] = {k: [] for k in range(CONSUMERS)}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < 90 * CONSUMERS and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got[int(m.value().split(b":")[0])].append(m.value())
    c.close()
    assert got == sent
