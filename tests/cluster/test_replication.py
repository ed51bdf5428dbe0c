"""Replication in cluster mode (workers/replication.py), real ZooKeeper and three real
`mpbroker serve` processes (2 workers each), real clients (confluent-kafka):

* acks=all with RF=3 / min.insync.replicas=2: every broker ends with a byte-identical
  log (follower fetches cross workers through the router);
* an idempotent acks=all producer and a consumer run throughout while the leader is
  killed (-9), a broker is bounced cleanly (SIGTERM + start), the controller is killed
  (-9) and the leader is isolated (SIGSTOP past its ZooKeeper session, which expires):
  the consumer's stream of each partition is in order without duplicates and ends up
  holding every acknowledged message exactly once, a fresh read agrees, and the
  replicas' logs are identical (followers that were behind or had divergent tails
  truncated to the leader's);
* with 2 of 3 brokers down, acks=all gets NOT_ENOUGH_REPLICAS (acks=1 still works).
"""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode as E
from storage.batch import BatchBuilder, iter_batches
from storage.log import Log, LogConfig
from workers.kafka_client import KafkaConnection

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC_CONFIG = {"min.insync.replicas": "2"}


def create_topic(c, name, partitions=2, rf=3, config=None):
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    fs = a.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                         operation_timeout=30, request_timeout=30)
    fs[name].result(30)


def full_isr(c, topic, partitions, n=3):
    return all(len((c.state(topic, p) or {}).get("isr", ())) == n for p in range(partitions))


def consume_all(bootstrap, topic, partitions, expect: dict, timeout=60.0) -> dict:
    """{partition: [values]} read from offset 0 until each has `expect[p]` values."""
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and any(len(out[p]) < expect[p] for p in out):
            m = cons.poll(0.5)
            if m is not None and not m.error():
                out[m.partition()].append(m.value())
        # a little more: anything beyond what we expect (duplicates) must show up too
        end = time.monotonic() + 2
        while time.monotonic() < end:
            m = cons.poll(0.2)
            if m is not None and not m.error():
                out[m.partition()].append(m.value())
    finally:
        cons.close()
    return out


def replica_logs(c, topic, partition) -> dict:
    """{broker id: all record-batch bytes} of one partition on every broker (the brokers
    must be stopped: this opens their logs)."""
    out = {}
    for i, b in c.brokers.items():
        path = b.data_dir / f"{topic}-{partition}"
        lg = Log.open(str(path), LogConfig())
        try:
            out[i] = bytes(lg.read_records_bytes(lg.log_start_offset, 1 << 30))
        finally:
            lg.close()
    return out


async def _log_sizes(b, topic: str, partitions: int) -> dict:
    """{partition: the bytes of its log} on broker b (DescribeLogDirs asked of it)."""
    conn = await KafkaConnection.connect(b.host, b.port, timeout_ms=15000)
    try:
        resp = await conn.request(K.DESCRIBE_LOG_DIRS, 1, {"topics": [
            {"topic": topic, "partitions": list(range(partitions))}]})
    finally:
        await conn.close()
    return {p["partition_index"]: p["partition_size"] for r in resp["results"]
            for t in r["topics"] if t["name"] == topic for p in t["partitions"]}


def replicas_in_sync(c, topic, partitions) -> bool:
    """Every broker holds every partition with a log as long as every other's: the
    followers have fetched all the leader has (the condition `replica_logs` then checks
    byte for byte)."""
    sizes = [asyncio.run(_log_sizes(b, topic, partitions)) for b in c.brokers.values()]
    return all(len({s.get(p) for s in sizes}) == 1 and sizes[0].get(p) for p in range(partitions))


def values_of(raw: bytes) -> list:
    return [r.value for b in iter_batches(memoryview(raw)) if not b.is_control
            for r in b.records()]


class ProducerThread(threading.Thread):
    """An idempotent acks=all producer writing "p<partition>-<seq>" in sequence to each
    partition; `acked[p]` collects the values whose delivery succeeded."""

    def __init__(self, bootstrap, topic, partitions):
        super().__init__(daemon=True)
        # socket.timeout.ms: requests in flight to a broker that was SIGSTOPped time out
        # after 10 s, not librdkafka's 60 s (the idempotent producer waits for them before
        # it moves a partition to its new leader)
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                           "enable.idempotence": True, "message.timeout.ms": 60000,
                           "retry.backoff.ms": 100, "linger.ms": 5, "socket.timeout.ms": 10000,
                           "max.in.flight.requests.per.connection": 5})
        self.topic = topic
        self.partitions = partitions
        self.acked = {p: [] for p in range(partitions)}
        self.failed = []
        self.stop = threading.Event()
        self.sent = 0

    def _cb(self, err, msg):
        if err:
            self.failed.append((msg.partition(), msg.value(), str(err)))
        else:
            self.acked[msg.partition()].append(msg.value())

    def run(self):
        seq = 0
        while not self.stop.is_set():
            for part in range(self.partitions):
                v = b"p%d-%06d" % (part, seq)
                while True:
                    try:
                        self.p.produce(self.topic, v, partition=part, on_delivery=self._cb)
                        break
                    except BufferError:
                        self.p.poll(0.05)
            seq += 1
            self.sent = seq
            self.p.poll(0)
            time.sleep(0.005)           # the load's pace (not a wait for anything)
        self.p.flush(90)

    def acked_count(self):
        return sum(len(v) for v in self.acked.values())


class ConsumerThread(threading.Thread):
    """Reads every partition from offset 0 while the test runs; `got[p]` holds the values
    in the order they were delivered (an offset reset to the earliest would show up as
    duplicates)."""

    def __init__(self, bootstrap, topic, partitions):
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"live-{time.time()}",
                           "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                           "auto.offset.reset": "earliest", "socket.timeout.ms": 10000})
        self.c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.got = {p: [] for p in range(partitions)}
        self.stop = threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                m = self.c.poll(0.2)
                if m is not None and not m.error():
                    self.got[m.partition()].append(m.value())
        finally:
            self.c.close()

    def has_all(self, acked) -> bool:
        return all(set(v) <= set(self.got[p]) for p, v in acked.items())


def leader_of(c, topic, p):
    return (c.state(topic, p) or {}).get("leader", -1)


def wait_new_leader(c, topic, p, old):
    return c.wait_for(lambda: (lambda s: s if s and s["leader"] not in (old, -1) else None)(
        c.state(topic, p)), 40, f"a new leader for {topic}-{p}")


def test_acks_all_replicates_to_every_broker(cluster):
    c = cluster(3)
    create_topic(c, "rep", partitions=2, config=TOPIC_CONFIG)
    prod = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                     "enable.idempotence": True})
    errs = []
    for i in range(300):
        prod.produce("rep", b"v%d" % i, partition=i % 2,
                     on_delivery=lambda e, m: errs.append(e) if e else None)
    assert prod.flush(30) == 0 and not errs
    got = consume_all(c.bootstrap, "rep", 2, {0: 150, 1: 150})
    assert got[0] == [b"v%d" % i for i in range(0, 300, 2)]
    assert got[1] == [b"v%d" % i for i in range(1, 300, 2)]
    c.wait_for(lambda: full_isr(c, "rep", 2), 20, "full ISR")
    c.wait_for(lambda: replicas_in_sync(c, "rep", 2), 20, "the followers' logs as long as the leader's")
    for i in list(c.brokers):
        c.stop(i)
    for p in range(2):
        logs = replica_logs(c, "rep", p)
        assert len(set(logs.values())) == 1, {i: len(v) for i, v in logs.items()}
        assert len(values_of(logs[1])) == 150


def test_acknowledged_messages_survive_kill_bounce_controller_kill_and_isolation(cluster):
    c = cluster(3, overrides={"replica.lag.time.max.ms": 4000,
                              "unclean.leader.election.enable": "false"})
    parts = 2
    create_topic(c, "chaos", partitions=parts, config=TOPIC_CONFIG)
    pt = ProducerThread(c.bootstrap, "chaos", parts)
    ct = ConsumerThread(c.bootstrap, "chaos", parts)
    pt.start()
    ct.start()
    try:
        def progress(n, what):
            target, t0 = pt.acked_count() + n, time.monotonic()
            c.wait_for(lambda: pt.acked_count() >= target, 60, f"{n} more acks after {what}")
            print(f"\n{n} more acks after {what}: {time.monotonic() - t0:.1f}s")

        progress(200, "start")
        # 1. kill -9 the leader of partition 0, restart it later
        victim = leader_of(c, "chaos", 0)
        c.kill(victim)
        wait_new_leader(c, "chaos", 0, victim)
        progress(200, f"kill -9 of broker {victim}")
        c.start(victim)
        c.wait_for(lambda: full_isr(c, "chaos", parts), 60, f"broker {victim} back in the ISR")
        progress(100, "restart")
        # 2. clean bounce (controlled shutdown) of the leader of partition 1
        victim = leader_of(c, "chaos", 1)
        assert c.stop(victim) == 0
        progress(200, f"controlled shutdown of broker {victim}")
        c.start(victim)
        c.wait_for(lambda: full_isr(c, "chaos", parts), 60, f"broker {victim} back in the ISR")
        progress(100, "bounce")
        # 3. kill -9 the controller, restart it later
        victim, epoch = c.controller()
        c.kill(victim)
        c.wait_for(lambda: c.controller()[0] not in (-1, victim), 40, "a new controller")
        progress(200, f"kill -9 of the controller (broker {victim})")
        c.start(victim)
        c.wait_for(lambda: full_isr(c, "chaos", parts), 60, f"broker {victim} back in the ISR")
        progress(100, "controller restart")
        # 4. isolate the leader of partition 0 (SIGSTOP past its ZooKeeper session)
        victim = leader_of(c, "chaos", 0)
        c.pause(victim)
        try:
            wait_new_leader(c, "chaos", 0, victim)
            progress(200, f"isolation of broker {victim}")
        finally:
            c.resume(victim)
        c.wait_for(lambda: full_isr(c, "chaos", parts), 60, f"broker {victim} back in the ISR")
        progress(100, "resume")
    finally:
        pt.stop.set()
        pt.join(120)
        try:
            c.wait_for(lambda: ct.has_all(pt.acked), 90, "the live consumer to see every ack")
            # the scenario: a window after the last ack in which duplicates, if any, show up
            time.sleep(1)
        finally:
            ct.stop.set()
            ct.join(30)
    assert not pt.is_alive()
    acked = pt.acked
    print(f"\nsent {pt.sent} per partition, acked {pt.acked_count()}, failed {len(pt.failed)}")
    for p in range(parts):
        live = ct.got[p]
        assert all(x < y for x, y in zip(live, live[1:])), f"live stream of {p} out of order or duplicated"
        missing = set(acked[p]) - set(live)
        assert not missing, f"{len(missing)} acknowledged messages never consumed in {p}"
    got = consume_all(c.bootstrap, "chaos", parts, {p: len(acked[p]) for p in range(parts)},
                      timeout=90)
    for p in range(parts):
        vals = got[p]
        assert len(vals) == len(set(vals)), f"duplicates in partition {p}"
        assert vals == sorted(vals), f"out of order in partition {p}"
        missing = set(acked[p]) - set(vals)
        assert not missing, f"{len(missing)} acknowledged messages lost in {p}: {sorted(missing)[:5]}"
    # replicas are identical once everything settled
    c.wait_for(lambda: full_isr(c, "chaos", parts), 60, "full ISR at the end")
    c.wait_for(lambda: replicas_in_sync(c, "chaos", parts), 30,
               "the followers' logs as long as the leader's")
    for i in list(c.brokers):
        c.stop(i)
    for p in range(parts):
        logs = replica_logs(c, "chaos", p)
        assert len(set(logs.values())) == 1, {i: len(v) for i, v in logs.items()}
        assert values_of(logs[1]) == got[p]


async def _raw_produce(host, port, topic, partition, acks):
    conn = await KafkaConnection.connect(host, port, timeout_ms=15000)
    try:
        b = BatchBuilder()
        b.append(None, b"x")
        resp = await conn.request(K.PRODUCE, 9, {"acks": acks, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": b.build()}]}]})
        return resp["responses"][0]["partition_responses"][0]["error_code"]
    finally:
        await conn.close()


def test_two_of_three_down_acks_all_not_enough_replicas(cluster):
    c = cluster(3)
    create_topic(c, "nr", partitions=1, config=TOPIC_CONFIG)
    leader = leader_of(c, "nr", 0)
    others = [i for i in c.brokers if i != leader]
    for i in others:
        c.kill(i)
    c.wait_for(lambda: c.state("nr", 0)["isr"] == [leader], 40, "ISR shrunk to the leader")
    b = c.brokers[leader]
    code = c.wait_for(lambda: (lambda e: e if e == E.NOT_ENOUGH_REPLICAS else None)(
        asyncio.run(_raw_produce(b.host, b.port, "nr", 0, -1))), 20, "NOT_ENOUGH_REPLICAS")
    assert code == E.NOT_ENOUGH_REPLICAS
    assert asyncio.run(_raw_produce(b.host, b.port, "nr", 0, 1)) == 0
    # one follower back: acks=all works again once it rejoined the ISR
    c.start(others[0])
    c.wait_for(lambda: len(c.state("nr", 0)["isr"]) == 2, 40, "ISR expanded")
    c.wait_for(lambda: asyncio.run(_raw_produce(b.host, b.port, "nr", 0, -1)) == 0, 20,
               "acks=all accepted")
