"""`mpbroker placement balance|history|show --watch` on a real broker with 2 workers.

A skewed load (a confluent-kafka producer and consumer on the two partitions of a
4-partition topic that the default spread puts on worker 0, running throughout):
`balance` reports the imbalance over its threshold and moves exactly one partition (the
fewest: one move makes the two workers even), the clients see no error and every
record arrives once, in order; a second `balance` finds nothing to do; `history` lists
the move; `show --watch` draws the workers' load. The same load with continuous
balancing (`placement.balance.interval.ms`): one move by itself, then none.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.integration import broker as h
from tests.integration.test_multiworker import owners, placement, placement_cli, show
from tests.integration.test_multiworker import two_workers  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


class SkewedLoad:
    """A producer writing to `parts` and a consumer reading them, until stopped."""

    def __init__(self, b, topic, parts):
        self.b, self.topic, self.parts = b, topic, parts
        self.stop = threading.Event()
        self.errors: list = []
        self.acked: dict[int, list[bytes]] = {p: [] for p in parts}
        self.read: dict[int, list[bytes]] = {p: [] for p in parts}
        self.sent = 0
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def _produce(self):
        p = h.producer(self.b.bootstrap, acks="all", **{"enable.idempotence": True})

        def cb(err, msg):
            if err is not None:
                self.errors.append(("produce", err))
            else:
                self.acked[msg.partition()].append(msg.value())
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline and self.sent < 200000:
            for part in self.parts:
                p.produce(self.topic, b"%d-%08d" % (part, self.sent) + b"x" * 500,
                          partition=part, on_delivery=cb)
                self.sent += 1
            p.poll(0)
            time.sleep(0.002)           # the load's pace (not a wait for anything)
        if p.flush(60):
            self.errors.append(("produce", "not flushed"))

    def _consume(self):
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
        c = h.consumer(self.b.bootstrap)
        c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self.parts])
        deadline = time.monotonic() + 180
        try:
            while time.monotonic() < deadline:
                done = self.stop.is_set() and not self.threads[0].is_alive() and all(
                    len(self.read[p]) >= len(self.acked[p]) for p in self.parts)
                if done:
                    return
                for m in c.consume(500, timeout=0.2):
                    err = m.error()
                    if err is None:
                        self.read[m.partition()].append(m.value())
                    elif err.code() != KafkaError._PARTITION_EOF:
                        self.errors.append(("consume", err))
        finally:
            c.close()

    def start(self):
        for t in self.threads:
            t.start()

    def wait_flowing(self, n: int = 100, timeout: float = 60) -> None:
        """Until `n` more records of every partition were acked and read back."""
        acked = {p: len(v) for p, v in self.acked.items()}
        read = {p: len(v) for p, v in self.read.items()}
        h.wait_until(lambda: self.errors or all(
            len(self.acked[p]) >= acked[p] + n and len(self.read[p]) >= read[p] + n
            for p in self.parts), timeout, f"{n} more records acked and read on {self.parts}",
            self.b)
        assert not self.errors, self.errors[:5]

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(200)


def test_balance_moves_the_fewest_partitions_under_load_without_client_errors(two_workers):  # noqa: F811
    b = two_workers({"placement.balance.cooldown.ms": 0})
    topic = f"skew-{uuid.uuid4().hex[:8]}"
    h.create_topic(b.bootstrap, topic, 4)
    own = owners(show(b), topic)
    hot = sorted(p for p, w in own.items() if w == 0)
    assert len(hot) == 2, own                         # the default spread: 2 and 2
    load = SkewedLoad(b, topic, hot)
    load.start()
    try:
        load.wait_flowing()                            # the load is established
        res = placement(b, "balance", "--interval", "2", timeout=120)
        assert res["imbalance_before"] > res["threshold"] == 0.2, res
        assert len(res["moves"]) == 1, res             # one move makes them even
        (m,) = res["moves"]
        assert (m["topic"], m["from"], m["to"]) == (topic, 0, 1) and m["partition"] in hot
        assert res["imbalance_after_estimate"] <= 0.2, res
        assert owners(show(b), topic)[m["partition"]] == 1
        load.wait_flowing()                 # flowing again, through the partition's new owner
        again = placement(b, "balance", "--interval", "2", timeout=120)
        # no second move (no flapping), and the measured imbalance fell. Not "at most
        # the threshold": measured after the move it is 0.16-0.19 on a quiet machine,
        # and one run of the parallel suite measured 0.207 (the CPU of a shared machine)
        assert again["moves"] == [] and again["imbalance_before"] < res["imbalance_before"], \
            (res, again)
    finally:
        load.finish()
    assert not load.errors, load.errors[:5]
    for p in hot:
        assert load.read[p] == load.acked[p], (p, len(load.read[p]), len(load.acked[p]))
    assert sum(len(v) for v in load.acked.values()) == load.sent
    hist = placement(b, "history")
    assert [(e["topic"], e["partition"], e["from"], e["to"], e["reason"]) for e in hist] == \
        [(topic, m["partition"], 0, 1, "balance")]
    watch = placement_cli(b, "show", "--watch", "--count", "1", "--interval", "0.5")
    assert watch.returncode == 0, watch.stderr
    assert "imbalance" in watch.stdout and "threshold 20%" in watch.stdout, watch.stdout


def test_continuous_balancing_moves_once_and_then_holds(two_workers):  # noqa: F811
    """placement.balance.interval.ms: the controller balances by itself (smoothed
    loads), once; with the load unchanged it makes no further move (no flapping)."""
    b = two_workers({"placement.balance.interval.ms": 2000})
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    h.create_topic(b.bootstrap, topic, 4)
    own = owners(show(b), topic)
    hot = sorted(p for p, w in own.items() if w == 0)
    load = SkewedLoad(b, topic, hot)
    load.start()
    try:
        deadline = time.monotonic() + 60
        hist: list = []
        while time.monotonic() < deadline and not hist:
            hist = placement(b, "history")
            time.sleep(0.5)
        assert [(e["topic"], e["from"], e["to"], e["reason"]) for e in hist] == \
            [(topic, 0, 1, "auto")], hist
        time.sleep(8)    # the scenario: 4 rounds (every 2 s) on an even load, none may move
        assert placement(b, "history") == hist
    finally:
        load.finish()
    assert not load.errors, load.errors[:5]
    for p in hot:
        assert load.read[p] == load.acked[p]
    assert "placement (auto): moved" in b.log_path.read_text()
