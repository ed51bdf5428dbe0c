"""Consumer groups and committed offsets against the real broker, with real clients.

Group members run as subprocesses (one small consumer script per client library, or
`kcat -G`), so that "leaves" is SIGTERM (the client closes and sends LeaveGroup) and
"crashes" is SIGKILL (nothing is sent; the session timeout must expel it). Assignments are
read back with the confluent-kafka AdminClient (DescribeGroups / ConsumerGroupDescribe),
which also checks those APIs.

The module's own broker runs with a short rebalance delay and session limits so that
the timeouts being tested are seconds, not minutes:
`group.initial.rebalance.delay.ms=0`, `group.min.session.timeout.ms=1000`, and for the
KIP-848 protocol `group.consumer.session.timeout.ms=4000`,
`group.consumer.heartbeat.interval.ms=500`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from mpbroker.protocol import codec, framing
from tests.integration import broker as h
from tests.integration.broker import Broker

SESSION_MS = 4000        # classic members' session.timeout.ms in these tests
HEARTBEAT_MS = 500
CONSUMER_SESSION_MS = 4000  # group.consumer.session.timeout.ms (KIP-848, broker side)
OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": CONSUMER_SESSION_MS,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
    "offsets.topic.num.partitions": 4,
}


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    if h.external_bootstrap():
        pytest.skip("these tests configure and restart their own broker")
    b = Broker(tmp_path_factory.mktemp("groups-broker"), OVERRIDES, name="groups-broker")
    b.start()
    yield b
    b.stop() if b.is_alive() else b.kill()


@pytest.fixture
def gb(module_broker, request):
    """The module's broker, restarted if a previous test left it dead; its log is
    attached to a failing test's report."""
    if not module_broker.is_alive():
        module_broker.kill()
        module_broker.start()
    if not hasattr(request.node, "_brokers"):
        request.node._brokers = []
    request.node._brokers.append((module_broker, module_broker.log_size()))
    return module_broker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------- member processes

_CONFLUENT = """
import signal, sys
from confluent_kafka import Consumer
bs, group, topic, extra = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
conf = {"bootstrap.servers": bs, "group.id": group, "broker.address.family": "v4",
        "auto.offset.reset": "earliest", **extra}
c = Consumer(conf)
running = [True]
signal.signal(signal.SIGTERM, lambda *a: running.__setitem__(0, False))
c.subscribe([topic])
print("STARTED", flush=True)
while running[0]:
    c.poll(0.2)
c.close()
"""

_KAFKA_PYTHON = """
import logging, signal, sys
from kafka import KafkaConsumer
logging.basicConfig(level=logging.INFO, format="%%(asctime)s %%(threadName)s %%(name)s %%(levelname)s %%(message)s")
logging.getLogger("kafka.coordinator").setLevel(logging.DEBUG)
bs, group, topic, extra = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
c = KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                  session_timeout_ms=%d, heartbeat_interval_ms=%d, **extra)
# kafka-python 3.0.12 race (see KAFKA_PYTHON_JOIN_RACE in the test module): know the
# topic's partitions before the first poll joins the group
assert c.partitions_for_topic(topic)
running = [True]
signal.signal(signal.SIGTERM, lambda *a: running.__setitem__(0, False))
print("STARTED", flush=True)
while running[0]:
    c.poll(timeout_ms=200)
c.close()
""" % (SESSION_MS, HEARTBEAT_MS)

_AIOKAFKA = """
import asyncio, logging, signal, sys
from aiokafka import AIOKafkaConsumer
logging.basicConfig(level=logging.INFO, format="%%(asctime)s %%(name)s %%(levelname)s %%(message)s")
logging.getLogger("aiokafka.consumer.group_coordinator").setLevel(logging.DEBUG)
bs, group, topic, extra = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
async def main():
    c = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                         session_timeout_ms=%d, heartbeat_interval_ms=%d, **extra)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await c.start()
    print("STARTED", flush=True)
    while not stop.is_set():
        await c.getmany(timeout_ms=200)
    await c.stop()
asyncio.run(main())
""" % (SESSION_MS, HEARTBEAT_MS)

CLIENTS = ["confluent", "kafka-python", "aiokafka", "kcat"]

# KAFKA_PYTHON_JOIN_RACE: kafka-python 3.0.12 loses a rejoin that a metadata change
# started when poll()'s timeout runs out while the JoinGroup/SyncGroup round is in
# flight: the next poll sees the assignment snapshot equal to the metadata snapshot
# (need_rejoin() is False), so the join's completion (state STABLE, heartbeats on, the
# new assignment) never runs; the member never heartbeats again and the coordinator
# expels it after session.timeout.ms. Seen here about once in 70 runs under load: the
# leader's first assignment ran before the topic's metadata arrived ("No partition
# metadata for topic"), and the metadata update made it rejoin at once. The members
# below ask for the topic's partitions before their first poll, so that the first
# assignment already sees them and no metadata-started rejoin follows.


class Member:
    """One group member in its own process."""

    def __init__(self, client: str, bs: str, group: str, topic: str, extra: dict | None = None,
                 log_path=None):
        self.client = client
        self.log_path = log_path
        extra = dict(extra or {})
        if client == "kcat":
            cmd = ["kcat", "-b", bs, "-G", group, "-q", "-o", "beginning",
                   "-X", f"session.timeout.ms={SESSION_MS}",
                   "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}", "-X", "broker.address.family=v4",
                   topic]
        else:
            script = {"confluent": _CONFLUENT, "kafka-python": _KAFKA_PYTHON,
                      "aiokafka": _AIOKAFKA}[client]
            if client == "confluent":
                extra.setdefault("session.timeout.ms", SESSION_MS)
                extra.setdefault("heartbeat.interval.ms", HEARTBEAT_MS)
                if extra.get("group.protocol") == "consumer":
                    extra.pop("session.timeout.ms")
                    extra.pop("heartbeat.interval.ms")
            cmd = [sys.executable, "-c", script, bs, group, topic, repr(extra)]
        env = dict(os.environ, PYTHONPATH=str(h.REPO_ROOT))
        # the client's own log (its stderr) goes to a file, attached to a failing report
        err = open(log_path, "wb") if log_path is not None else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        finally:
            if log_path is not None:
                err.close()

    def log_text(self, limit: int = 60_000) -> str:
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
                data = f.read(limit)
        except OSError as e:
            return repr(e)
        return data.decode(errors="replace")

    def leave(self, timeout: float = 20) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)

    def crash(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


@pytest.fixture
def members(request, tmp_path):
    """Starts member processes; their logs are attached to the report of a failing test
    (tests/integration/conftest.py reads `_members`)."""
    made: list[Member] = []
    request.node._members = made

    def start(*args, **kw) -> Member:
        kw.setdefault("log_path", tmp_path / f"member-{len(made)}-{args[0]}.log")
        m = Member(*args, **kw)
        made.append(m)
        return m

    yield start
    for m in made:
        m.stop()


def describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)


def assignment_of(admin: AdminClient, group: str) -> list[list[int]]:
    """Sorted partition lists of the members, if the group is Stable; else None."""
    from confluent_kafka import ConsumerGroupState

    d = describe(admin, group)
    if d.state != ConsumerGroupState.STABLE:
        return None
    return sorted(sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members)


def wait_assignment(admin, group, want_sizes: list[int], timeout: float = 45.0,
                    partitions: int = 6) -> float:
    """Until the Stable group's members own `want_sizes` partitions (covering all, no
    overlap). Returns the seconds it took."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            last = assignment_of(admin, group)
        except Exception as e:  # noqa: BLE001 - the group may be between states
            last = repr(e)
        if isinstance(last, list) and sorted(len(a) for a in last) == sorted(want_sizes):
            flat = [p for a in last for p in a]
            assert sorted(flat) == list(range(partitions)), last
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"group {group}: wanted sizes {want_sizes}, last seen {last}")


def assert_expelled_by_session_timeout(b: Broker, group: str, since: int) -> None:
    """The coordinator removed a member of `group` because its session expired (the
    coordinator's log line; not by any other path, and so not before the timeout)."""
    if b.external:
        return
    log = b.log_text(since)
    assert any(f"group {group}: member " in line and "failed (session timeout)" in line
               for line in log.splitlines()), log


# ----------------------------------------------------------------- membership

@pytest.mark.parametrize("client", CLIENTS)
def test_split_leave_and_crash(gb, members, client):
    """Two members split 6 partitions; one leaves and the other gets all six; a third
    member joins and is SIGKILLed: it is expelled after the session timeout (not before)
    and its partitions move back."""
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("split"), 6)
    group = unique(f"g-{client}")
    admin = h.admin(bs)
    a = members(client, bs, group, topic)
    b = members(client, bs, group, topic)
    wait_assignment(admin, group, [3, 3])
    b.leave()
    took = wait_assignment(admin, group, [6])
    print(f"\n{client}: survivor owns all 6 partitions {took:.2f}s after the other left")

    c = members(client, bs, group, topic)
    wait_assignment(admin, group, [3, 3])
    time.sleep(1.0)  # the scenario: a member that heartbeat a while after the rebalance dies
    at_kill = gb.log_size()
    c.crash()
    took = wait_assignment(admin, group, [6], timeout=SESSION_MS / 1000 + 30)
    print(f"{client}: SIGKILLed member expelled and its partitions moved after {took:.2f}s "
          f"(session.timeout.ms={SESSION_MS})")
    assert_expelled_by_session_timeout(gb, group, at_kill)
    a.leave()


def test_consumer_protocol_pair(gb, members):
    """KIP-848 (group.protocol=consumer, ConsumerGroupHeartbeat): librdkafka consumers
    split the topic with the server-side assignor, take over on leave, and a SIGKILLed
    member is fenced after group.consumer.session.timeout.ms."""
    from confluent_kafka import ConsumerGroupType

    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("kip848"), 6)
    group = unique("g-kip848")
    admin = h.admin(bs)
    conf = {"group.protocol": "consumer"}
    a = members("confluent", bs, group, topic, conf)
    b = members("confluent", bs, group, topic, conf)
    took = wait_assignment(admin, group, [3, 3])
    print(f"\nKIP-848: two members stable after {took:.2f}s")
    d = describe(admin, group)
    assert d.type == ConsumerGroupType.CONSUMER
    b.leave()
    wait_assignment(admin, group, [6])
    c = members("confluent", bs, group, topic, conf)
    wait_assignment(admin, group, [3, 3])
    time.sleep(1.0)  # the scenario: a member that heartbeat a while after the rebalance dies
    at_kill = gb.log_size()
    c.crash()
    took = wait_assignment(admin, group, [6], timeout=CONSUMER_SESSION_MS / 1000 + 30)
    print(f"KIP-848: SIGKILLed member fenced after {took:.2f}s "
          f"(group.consumer.session.timeout.ms={CONSUMER_SESSION_MS})")
    assert_expelled_by_session_timeout(gb, group, at_kill)
    a.leave()


def test_consumer_protocol_consumes_and_commits(gb):
    """A KIP-848 consumer pair consumes every record and commits (OffsetCommit v9
    with member epochs); a classic consumer of the same group id, once the group is
    empty, resumes from those offsets."""
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("kip848c"), 4)
    group = unique("g-kip848c")
    p = h.producer(bs)
    for i in range(400):
        p.produce(topic, key=str(i).encode(), value=b"v%d" % i, partition=i % 4)
    h.flush(p)
    conf = {**h.common_conf(bs), "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    cs = [Consumer(conf), Consumer(conf)]
    for c in cs:
        c.subscribe([topic])
    seen = []
    assignments = []

    def at_end(c) -> bool:
        return all(tp.offset == 100 for tp in c.position(c.assignment()))
    deadline = time.monotonic() + 45
    # the first member may read all 400 before the second one's partitions are revoked
    # from it (a heartbeat interval later): keep polling until the split settles and each
    # member has read its own partitions to the end (nothing is committed before the
    # split, so the second member reads its partitions again: at-least-once, as Kafka;
    # without that read it would have no offset to commit)
    while (sorted(len(a) for a in assignments) != [2, 2] or not all(at_end(c) for c in cs)) \
            and time.monotonic() < deadline:
        for c in cs:
            for m in c.consume(100, timeout=0.1):
                if m.error() is None:
                    seen.append((m.partition(), m.offset()))
        assignments = [sorted(tp.partition for tp in c.assignment()) for c in cs]
    assert set(seen) == {(p, o) for p in range(4) for o in range(100)}, (len(seen), assignments)
    assert sorted(len(a) for a in assignments) == [2, 2], assignments
    for c in cs:
        c.commit(asynchronous=False)  # OffsetCommit v9 with the member epoch
        c.close()
    c = Consumer({**conf, "group.protocol": "classic", "session.timeout.ms": SESSION_MS})
    committed = c.committed([TopicPartition(topic, i) for i in range(4)], timeout=10)
    assert [tp.offset for tp in committed] == [100] * 4
    c.close()


def test_static_member_bounce_causes_no_rebalance(gb):
    """KIP-345: a member with group.instance.id that restarts within the session timeout
    gets its old partitions back and the other member is not rebalanced."""
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("static"), 6)
    group = unique("g-static")
    events = {"a": [], "b": []}

    def make(name):
        c = Consumer({**h.common_conf(bs), "group.id": group, "group.instance.id": name,
                      "session.timeout.ms": 10000, "heartbeat.interval.ms": HEARTBEAT_MS,
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic], on_assign=lambda _c, ps: events[name].append(("assign", len(ps))),
                    on_revoke=lambda _c, ps: events[name].append(("revoke", len(ps))))
        return c

    a, b = make("a"), make("b")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (len(a.assignment()) == 3 and len(b.assignment()) == 3):
        a.poll(0.1)
        b.poll(0.1)
    before_b = sorted(tp.partition for tp in b.assignment())
    assert len(before_b) == 3 and len(a.assignment()) == 3
    for _ in range(10):
        a.poll(0.1)
    a_events = list(events["a"])
    b.close()  # static members do not send LeaveGroup
    for _ in range(10):
        a.poll(0.1)
    b = make("b")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(b.assignment()) != 3:
        a.poll(0.1)
        b.poll(0.1)
    for _ in range(20):  # a rebalance would show up on a within a few heartbeats
        a.poll(0.1)
        b.poll(0.1)
    assert sorted(tp.partition for tp in b.assignment()) == before_b
    assert events["a"] == a_events, events["a"]
    assert len(a.assignment()) == 3
    a.close()
    b.close()


def test_cooperative_sticky_keeps_unaffected_partitions(gb):
    """KIP-429 incremental rebalance: when a second member joins, the first gives up
    three partitions and keeps the other three assigned throughout."""
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("coop"), 6)
    group = unique("g-coop")
    owned = {"a": set(), "b": set()}
    low_water = {"a": 99}
    revoked = []

    def make(name):
        c = Consumer({**h.common_conf(bs), "group.id": group, "session.timeout.ms": SESSION_MS,
                      "heartbeat.interval.ms": HEARTBEAT_MS,
                      "partition.assignment.strategy": "cooperative-sticky",
                      "auto.offset.reset": "earliest"})

        def on_assign(_c, ps):
            owned[name].update(p.partition for p in ps)

        def on_revoke(_c, ps):
            owned[name].difference_update(p.partition for p in ps)
            if name == "a":
                revoked.append(sorted(p.partition for p in ps))
                low_water["a"] = min(low_water["a"], len(owned["a"]))
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return c

    a = make("a")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(owned["a"]) != 6:
        a.poll(0.1)
    assert owned["a"] == set(range(6))
    kept_candidates = set(owned["a"])
    b = make("b")
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and not (len(owned["a"]) == 3 and len(owned["b"]) == 3):
        a.poll(0.1)
        b.poll(0.1)
    assert len(owned["a"]) == 3 and len(owned["b"]) == 3, owned
    assert owned["a"] | owned["b"] == set(range(6))
    assert low_water["a"] == 3, (low_water, revoked)  # never dropped below its kept three
    assert [len(r) for r in revoked] == [3], revoked
    assert owned["a"] <= kept_candidates
    a.close()
    b.close()


# ----------------------------------------------------------------- committed offsets

def test_committed_offsets_survive_consumer_and_broker_restart(gb):
    """Offsets committed by one client are where the next consumer of the group starts,
    after a consumer restart and after a broker restart, across client libraries."""
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("offsets"), 2)
    group = unique("g-offsets")
    p = h.producer(bs)
    for i in range(40):
        p.produce(topic, value=b"m%d" % i, partition=i % 2)
    h.flush(p)

    # confluent-kafka consumes 7 of partition 0 and 3 of partition 1 and commits
    c = Consumer({**h.common_conf(bs), "group.id": group, "session.timeout.ms": SESSION_MS,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    want = {0: 7, 1: 3}
    got = {0: 0, 1: 0}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and got != want:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        if got[m.partition()] < want[m.partition()]:
            got[m.partition()] += 1
            c.commit(message=m, asynchronous=False)
    assert got == want
    c.close()

    # consumer restart: kafka-python in the same group starts at the committed offsets
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    kc = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                       session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    assert kc.committed(KTP(topic, 0)) == 7 and kc.committed(KTP(topic, 1)) == 3
    kc.subscribe([topic])
    assert kc.partitions_for_topic(topic)  # before the first join: KAFKA_PYTHON_JOIN_RACE
    first = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(first) < 2:
        for tp, msgs in kc.poll(timeout_ms=200).items():
            first.setdefault(tp.partition, msgs[0].offset)
    assert first == {0: 7, 1: 3}
    kc.commit({KTP(topic, 0): __import__("kafka").OffsetAndMetadata(9, "from kafka-python", -1)})
    kc.close()

    gb.restart()  # SIGTERM, then the same data dir

    async def aio_committed():
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP
        ac = AIOKafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
        await ac.start()
        try:
            return [await ac.committed(ATP(topic, i)) for i in range(2)]
        finally:
            await ac.stop()
    assert asyncio.run(aio_committed()) == [9, 3]

    c = Consumer({**h.common_conf(bs), "group.id": group, "session.timeout.ms": SESSION_MS,
                  "enable.auto.commit": False})
    committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=15)
    # offsets only: confluent-kafka writes its metadata NUL-terminated and reads it back
    # as a C string, so kafka-python's (no NUL) comes back with whatever heap bytes follow,
    # or fails to decode; kafka-python checks the metadata exactly
    assert [tp.offset for tp in committed] == [9, 3]
    kc = KafkaConsumer(bootstrap_servers=bs, group_id=group, enable_auto_commit=False)
    got = [kc.committed(KTP(topic, i), metadata=True) for i in range(2)]
    kc.close()
    assert [(om.offset, om.metadata) for om in got] == [(9, "from kafka-python"), (3, "")]
    c.subscribe([topic])
    first = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(first) < 2:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            first.setdefault(m.partition(), m.offset())
    assert first == {0: 9, 1: 3}
    c.close()

    # a hard crash of the broker (SIGKILL of the whole process group) keeps them too
    gb.restart(hard=True)
    c = Consumer({**h.common_conf(bs), "group.id": group, "session.timeout.ms": SESSION_MS})
    committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=15)
    assert [tp.offset for tp in committed] == [9, 3]
    c.close()


# ----------------------------------------------------------------- admin clients

def test_admin_list_describe_offsets_lag_delete(gb):
    bs = gb.bootstrap
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions

    topic = h.create_topic(bs, unique("admin"), 3)
    group = unique("g-admin")
    p = h.producer(bs)
    for i in range(30):
        p.produce(topic, value=b"x", partition=i % 3)
    h.flush(p)
    c = Consumer({**h.common_conf(bs), "group.id": group, "session.timeout.ms": SESSION_MS,
                  "enable.auto.commit": False, "client.id": "admin-test-member"})
    c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10),
                      TopicPartition(topic, 2, 0)], asynchronous=False)
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(c.assignment()) != 3:
        c.poll(0.1)
    admin = h.admin(bs)

    # confluent-kafka: list, describe (Stable, one member), offsets, lag
    listed = admin.list_consumer_groups(request_timeout=10).result(15)
    assert group in {g.group_id for g in listed.valid}
    d = describe(admin, group)
    assert d.state == ConsumerGroupState.STABLE and len(d.members) == 1
    assert d.members[0].client_id == "admin-test-member"
    assert sorted(tp.partition for tp in d.members[0].assignment.topic_partitions) == [0, 1, 2]
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    committed = {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == topic}
    assert committed == {0: 4, 1: 10, 2: 0}
    lag = {}
    for part, off in committed.items():
        _lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
        lag[part] = hi - off
    assert lag == {0: 6, 1: 0, 2: 10}

    # a group with members cannot be deleted
    fut = admin.delete_consumer_groups([group], request_timeout=10)[group]
    with pytest.raises(Exception) as exc:
        fut.result(15)
    assert "NON_EMPTY_GROUP" in str(exc.value) or "not empty" in str(exc.value).lower()

    # kafka-python's admin client sees the same
    from kafka.admin import KafkaAdminClient
    ka = KafkaAdminClient(bootstrap_servers=bs)
    try:
        assert group in [g["group_id"] for g in ka.list_groups()]
        offs = ka.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items() if tp.topic == topic} == committed
        desc = ka.describe_groups([group])[group]
        assert desc["group_state"] == "Stable" and len(desc["members"]) == 1
        assert desc["members"][0]["member_assignment"]["assigned_partitions"] == [
            {"topic": topic, "partitions": [0, 1, 2]}]
    finally:
        ka.close()

    c.close()  # now the group is Empty

    # aiokafka's admin client
    async def aio():
        from aiokafka.admin import AIOKafkaAdminClient
        aa = AIOKafkaAdminClient(bootstrap_servers=bs)
        await aa.start()
        try:
            groups = await aa.list_consumer_groups()
            offs = await aa.list_consumer_group_offsets(group)
            return [g[0] for g in groups], {tp.partition: om.offset for tp, om in offs.items()}
        finally:
            await aa.close()
    names, offs = asyncio.run(aio())
    assert group in names and offs == committed

    d = describe(admin, group)
    assert d.state == ConsumerGroupState.EMPTY and not d.members
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)
    ka = KafkaAdminClient(bootstrap_servers=bs)
    try:
        assert group not in [g["group_id"] for g in ka.list_groups()]
        assert ka.delete_groups([group])[group] != "OK"  # GROUP_ID_NOT_FOUND now
    finally:
        ka.close()
    listed = admin.list_consumer_groups(request_timeout=10).result(15)
    assert group not in {g.group_id for g in listed.valid}
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert all(tp.offset < 0 for tp in res.topic_partitions)


def test_admin_delete_offsets_and_list_groups_by_state(gb):
    """OffsetDelete through kafka-python's admin client (confluent-kafka's Python binding
    has no DeleteConsumerGroupOffsets): partitions of unknown topics get
    UNKNOWN_TOPIC_OR_PARTITION, a topic the live group consumes GROUP_SUBSCRIBED_TO_TOPIC,
    the rest are deleted; ListGroups with a state filter (confluent-kafka, ListGroups v4+)."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
    from kafka import TopicPartition as KTP
    from kafka import errors as kerr
    from kafka.admin import KafkaAdminClient

    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("odel"), 2)
    other = h.create_topic(bs, unique("odel-other"), 1)
    missing = unique("odel-missing")
    group = unique("g-odel")
    c = Consumer({**h.common_conf(bs), "group.id": group, "session.timeout.ms": SESSION_MS,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6),
                      TopicPartition(other, 0, 7)], asynchronous=False)
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(c.assignment()) != 2:
        c.poll(0.1)
    admin = h.admin(bs)

    def listed(*states):
        res = admin.list_consumer_groups(request_timeout=10, states=set(states)).result(15)
        return {g.group_id: g.state for g in res.valid}

    def committed():
        res = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)])[group].result(15)
        return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}

    assert listed(ConsumerGroupState.STABLE).get(group) == ConsumerGroupState.STABLE
    assert group not in listed(ConsumerGroupState.EMPTY)
    ka = KafkaAdminClient(bootstrap_servers=bs)
    try:
        res = ka.delete_group_offsets(group, [KTP(topic, 0), KTP(other, 0), KTP(other, 7),
                                              KTP(missing, 0)])
        assert res == {KTP(topic, 0): kerr.GroupSubscribedToTopicError,
                       KTP(other, 0): kerr.NoError,
                       KTP(other, 7): kerr.UnknownTopicOrPartitionError,
                       KTP(missing, 0): kerr.UnknownTopicOrPartitionError}
        assert committed() == {(topic, 0): 5, (topic, 1): 6}

        c.close()  # the group is Empty now: its offsets of any topic may go
        assert listed(ConsumerGroupState.EMPTY).get(group) == ConsumerGroupState.EMPTY
        assert group not in listed(ConsumerGroupState.STABLE, ConsumerGroupState.DEAD)
        res = ka.delete_group_offsets(group, [KTP(topic, 0)])
        assert res == {KTP(topic, 0): kerr.NoError}
        assert committed() == {(topic, 1): 6}
        with pytest.raises(kerr.GroupIdNotFoundError):
            ka.delete_group_offsets(unique("g-none"), [KTP(topic, 0)])
    finally:
        ka.close()


# ----------------------------------------------------------------- scale

@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_fifty_consumers_on_hundred_partitions(gb, protocol):
    """50 confluent-kafka consumers (one process, librdkafka threads) subscribe to a
    100-partition topic at once; the time until every partition is owned by exactly one
    of them, two each, is printed."""
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("fifty"), 100)
    group = unique(f"g-fifty-{protocol}")
    owned = [set() for _ in range(50)]
    extra = {"session.timeout.ms": 30000, "heartbeat.interval.ms": 1000} if protocol == "classic" else {}
    consumers = []
    t0 = time.monotonic()
    for i in range(50):
        c = Consumer({**h.common_conf(bs), "group.id": group, "group.protocol": protocol,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})
        c.subscribe([topic],
                    on_assign=lambda _c, ps, i=i: owned[i].update(p.partition for p in ps),
                    on_revoke=lambda _c, ps, i=i: owned[i].difference_update(p.partition for p in ps),
                    on_lost=lambda _c, ps, i=i: owned[i].difference_update(p.partition for p in ps))
        consumers.append(c)
    stable = None
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0)
        if all(len(o) == 2 for o in owned) and set().union(*owned) == set(range(100)):
            stable = time.monotonic() - t0
            break
        time.sleep(0.02)
    print(f"\n50 consumers ({protocol} protocol) on 100 partitions: stable assignment "
          f"after {stable if stable is None else round(stable, 2)}s")
    closer = [threading.Thread(target=c.close) for c in consumers]
    for t in closer:
        t.start()
    for t in closer:
        t.join(30)
    assert stable is not None, sorted(len(o) for o in owned)


# ----------------------------------------------------------------- bad input (wire level)

class Wire:
    """Requests encoded with mpbroker.protocol, sent over a raw socket."""

    def __init__(self, bs: str):
        host, port = bs.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.corr = 0

    def call(self, api_key: int, version: int, body: dict) -> dict:
        self.corr += 1
        self.sock.sendall(framing.frame_request(api_key, version, self.corr, "bad-input-test", body))
        frame = h.recv_frame(self.sock)
        corr, pos = framing.parse_response_header(memoryview(frame), api_key, version)
        assert corr == self.corr
        return codec.decode_response(api_key, version, memoryview(frame), pos)

    def close(self):
        self.sock.close()


FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, SYNC_GROUP = 10, 8, 9, 11, 12, 14
CG_HEARTBEAT, CG_DESCRIBE = 68, 69
NONE, OFFSET_METADATA_TOO_LARGE, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL = 0, 12, 22, 23
UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, INVALID_REQUEST, GROUP_ID_NOT_FOUND = 25, 26, 42, 69
FENCED_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH = 110, 112, 113


def _coordinator_ready(w: Wire, group: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if w.call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["error_code"] == NONE:
            return
        time.sleep(0.2)
    raise AssertionError("no coordinator")


def _commit(w, version, group, topic, generation, member, metadata="", offset=1):
    body = {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": metadata}]}]}
    resp = w.call(OFFSET_COMMIT, version, body)
    return resp["topics"][0]["partitions"][0]["error_code"]


def test_bad_group_input_gets_kafka_errors(gb):
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("bad"), 1)
    group = unique("g-bad")
    w = Wire(bs)
    try:
        _coordinator_ready(w, group)
        # commits for a group that does not exist, with a generation
        assert _commit(w, 8, unique("nogroup"), topic, 5, "ghost") == ILLEGAL_GENERATION
        assert _commit(w, 9, unique("nogroup"), topic, 5, "ghost") == GROUP_ID_NOT_FOUND

        protocols = [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"}]
        join = {"group_id": group, "session_timeout_ms": 10, "rebalance_timeout_ms": 5000,
                "member_id": "", "protocol_type": "consumer", "protocols": protocols}
        assert w.call(JOIN_GROUP, 3, join)["error_code"] == INVALID_SESSION_TIMEOUT
        assert w.call(JOIN_GROUP, 3, {**join, "session_timeout_ms": 6000, "protocol_type": ""}
                      )["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        assert w.call(JOIN_GROUP, 3, {**join, "session_timeout_ms": 6000, "protocols": []}
                      )["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        joined = w.call(JOIN_GROUP, 3, {**join, "session_timeout_ms": 6000})
        assert joined["error_code"] == NONE and joined["generation_id"] == 1
        member = joined["member_id"]
        # another protocol type for a live group
        w2 = Wire(bs)
        try:
            assert w2.call(JOIN_GROUP, 3, {**join, "session_timeout_ms": 6000, "protocol_type": "connect"}
                           )["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        finally:
            w2.close()
        assert w.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": 7, "member_id": member,
                                      "assignments": []})["error_code"] == ILLEGAL_GENERATION
        assert w.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": 1, "member_id": member,
                                      "assignments": [{"member_id": member, "assignment": b""}]}
                      )["error_code"] == NONE
        assert w.call(HEARTBEAT, 1, {"group_id": group, "generation_id": 2, "member_id": member}
                      )["error_code"] == ILLEGAL_GENERATION
        assert w.call(HEARTBEAT, 1, {"group_id": unique("nogroup"), "generation_id": 1,
                                     "member_id": member})["error_code"] == UNKNOWN_MEMBER_ID
        # commits: wrong generation, unknown member, oversized metadata, then a good one
        assert _commit(w, 8, group, topic, 2, member) == ILLEGAL_GENERATION
        assert _commit(w, 8, group, topic, 1, "someone-else") == UNKNOWN_MEMBER_ID
        assert _commit(w, 8, group, topic, 1, member, metadata="x" * 4097) == OFFSET_METADATA_TOO_LARGE
        assert _commit(w, 8, group, topic, 1, member, metadata="x" * 4096, offset=5) == NONE
        fetched = w.call(OFFSET_FETCH, 3, {"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0]}]})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5
    finally:
        w.close()


def test_bad_consumer_group_heartbeats_get_kafka_errors(gb):
    bs = gb.bootstrap
    topic = h.create_topic(bs, unique("bad848"), 2)
    group = unique("g-bad848")
    w = Wire(bs)
    try:
        _coordinator_ready(w, group)
        base = {"group_id": group, "member_id": uuid.uuid4().hex, "member_epoch": 0,
                "rebalance_timeout_ms": 5000, "subscribed_topic_names": [topic], "topic_partitions": []}
        assert w.call(CG_HEARTBEAT, 1, {**base, "group_id": ""})["error_code"] == INVALID_REQUEST
        assert w.call(CG_HEARTBEAT, 1, {**base, "member_id": ""})["error_code"] == INVALID_REQUEST
        assert w.call(CG_HEARTBEAT, 1, {**base, "rebalance_timeout_ms": -1})["error_code"] == INVALID_REQUEST
        assert w.call(CG_HEARTBEAT, 1, {**base, "subscribed_topic_names": None})["error_code"] == INVALID_REQUEST
        assert w.call(CG_HEARTBEAT, 1, {**base, "server_assignor": "sticky-magic"}
                      )["error_code"] == UNSUPPORTED_ASSIGNOR
        assert w.call(CG_HEARTBEAT, 1, {**base, "member_epoch": 3})["error_code"] == UNKNOWN_MEMBER_ID
        joined = w.call(CG_HEARTBEAT, 1, base)
        assert joined["error_code"] == NONE and joined["member_epoch"] >= 1
        assert joined["heartbeat_interval_ms"] == HEARTBEAT_MS
        parts = sorted(p for t in joined["assignment"]["topic_partitions"] for p in t["partitions"])
        assert parts == [0, 1]
        epoch = joined["member_epoch"]
        hb = {"group_id": group, "member_id": base["member_id"], "member_epoch": epoch + 1}
        assert w.call(CG_HEARTBEAT, 1, hb)["error_code"] == FENCED_MEMBER_EPOCH
        ok = w.call(CG_HEARTBEAT, 1, {**hb, "member_epoch": epoch})
        assert ok["error_code"] == NONE and ok["member_epoch"] == epoch
        # offsets: the member epoch is the generation of OffsetCommit v9
        assert _commit(w, 9, group, topic, epoch + 5, base["member_id"]) == STALE_MEMBER_EPOCH
        assert _commit(w, 9, group, topic, epoch, "not-a-member") == UNKNOWN_MEMBER_ID
        assert _commit(w, 9, group, topic, epoch, base["member_id"], offset=3) == NONE
        # the classic protocol cannot join a consumer group with members
        join = {"group_id": group, "session_timeout_ms": 6000, "rebalance_timeout_ms": 5000,
                "member_id": "", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        assert w.call(JOIN_GROUP, 3, join)["error_code"] == INCONSISTENT_GROUP_PROTOCOL
        described = w.call(CG_DESCRIBE, 0, {"group_ids": [group, unique("nogroup")]})["groups"]
        assert described[0]["error_code"] == NONE and described[0]["group_state"] == "Stable"
        assert described[0]["members"][0]["member_epoch"] == epoch
        assert described[1]["error_code"] == GROUP_ID_NOT_FOUND
        left = w.call(CG_HEARTBEAT, 1, {**hb, "member_epoch": -1})
        assert left["error_code"] == NONE and left["member_epoch"] == -1
        described = w.call(CG_DESCRIBE, 0, {"group_ids": [group]})["groups"]
        assert described[0]["group_state"] == "Empty" and not described[0]["members"]
    finally:
        w.close()
