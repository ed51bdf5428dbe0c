"""Several workers (`num.workers` 2 and 4): cross-worker routing and placement.

Connections land on workers at random (SO_REUSEPORT), so the tests open several clients
and, where it matters, ask the broker which worker served a client's connection
(`mpbroker placement show --json` lists each worker's connections with their client id)
and which worker owns a partition. Data is checked byte for byte against what was sent.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.integration import broker as h

pytestmark = pytest.mark.skipif(h.external_bootstrap() is not None,
                                reason="needs our own multi-worker broker process")


def placement(b: h.Broker, *args: str, timeout: float = 60) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(h.REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "mpbroker.cli.main", "placement", *args, "-c",
           str(b.config_path), "--json"]
    for k, v in b.overrides.items():
        cmd += ["--override", f"{k}={v}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                         cwd=b.workdir)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def show(b: h.Broker, interval: float = 0.2, all_workers: bool = True) -> dict:
    """`placement show --json`; by default until every worker answers (one may boot)."""
    from mpbroker.cli.main import _admin_call     # the CLI's own call, without a subprocess
    deadline = time.monotonic() + 30
    while True:
        info = _admin_call(str(b.config_path), [f"{k}={v}" for k, v in b.overrides.items()],
                           {"cmd": "show", "interval": interval}, 30)
        if not all_workers or len(info["workers"]) == info["num_workers"] or \
                time.monotonic() > deadline:
            return info
        time.sleep(0.2)


def owners(info: dict, topic: str) -> dict[int, int]:
    return {p["partition"]: w["worker"] for w in info["workers"] for p in w["partitions"]
            if p["topic"] == topic}


def client_worker(info: dict, client_id: str) -> set[int]:
    return {w["worker"] for w in info["workers"] for c in w["connections"]
            if c["client_id"] == client_id and c["bytes_in"] > 0}


@pytest.fixture(scope="module", params=[2, 4])
def mw_broker(request, tmp_path_factory):
    n = request.param
    b = h.Broker(tmp_path_factory.mktemp(f"mw{n}"), {"num.workers": n}, name=f"workers{n}")
    b.start()
    show(b)
    b.num_workers = n
    yield b
    b.stop(timeout=30)


@pytest.fixture
def two_workers(tmp_path, request):
    made = []

    def make(extra=None):
        b = h.Broker(tmp_path / f"b{len(made)}", {"num.workers": 2, **(extra or {})},
                     name=f"two-workers{len(made)}")
        made.append(b)
        _track(request, b)
        b.start()
        show(b)
        return b
    yield make
    for b in made:
        if b.is_alive():
            b.stop(timeout=30)
        else:
            b.kill()


def _track(request, b):
    from tests.integration.conftest import _track as track
    track(request.node, b)


def _topic(b, partitions=12, name=None):
    name = name or f"mw-{uuid.uuid4().hex[:10]}"
    return h.create_topic(b.bootstrap, name, partitions)


# ------------------------------------------------------------------ data path
def test_produce_and_fetch_across_workers_bytes_identical(mw_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    b, n = mw_broker, mw_broker.num_workers
    nparts = 4 * n
    topic = _topic(b, nparts)
    info = show(b)
    own = owners(info, topic)
    assert set(own) == set(range(nparts)) and set(own.values()) == set(range(n)), own
    sent: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(nparts)}
    # several producers: each connection lands on some worker, most partitions are remote
    for k in range(3):
        p = h.producer(b.bootstrap, **{"client.id": f"cp{k}", "linger.ms": 2,
                                       "compression.type": ["none", "lz4", "zstd"][k]})
        for i in range(300):
            part = (i + k) % nparts
            key, val = f"k{k}-{i}".encode(), os.urandom(50 + (i % 7) * 100)
            p.produce(topic, val, key=key, partition=part)
            sent[part].append((key, val))
        h.flush(p)
    kp = KafkaProducer(bootstrap_servers=b.bootstrap, client_id="kp", acks="all", linger_ms=2)
    for i in range(200):
        part = i % nparts
        key, val = f"kp-{i}".encode(), os.urandom(80)
        kp.send(topic, val, key=key, partition=part)
        sent[part].append((key, val))
    kp.flush(30)
    kp.close()
    total = sum(len(v) for v in sent.values())
    # confluent consumers (several connections) and kafka-python read everything back
    for k in range(2):
        c = h.consumer(b.bootstrap, **{"client.id": f"cc{k}"})
        h.assign_from_beginning(c, topic, nparts)
        got = h.consume(c, total)
        c.close()
        per = {p: [] for p in range(nparts)}
        for m in got:
            per[m.partition()].append((m.key(), m.value()))
        assert per == sent
    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, client_id="kc", enable_auto_commit=False,
                       auto_offset_reset="earliest", consumer_timeout_ms=10000)
    kc.assign([KTP(topic, p) for p in range(nparts)])
    per = {p: [] for p in range(nparts)}
    count = 0
    deadline = time.monotonic() + 30
    while count < total and time.monotonic() < deadline:
        for tp, msgs in kc.poll(timeout_ms=1000, max_records=5000).items():
            for m in msgs:
                per[tp.partition].append((m.key, m.value))
                count += 1
    ends = kc.end_offsets([KTP(topic, p) for p in range(nparts)])
    kc.close()
    assert per == sent
    assert {tp.partition: off for tp, off in ends.items()} == {p: len(v) for p, v in sent.items()}
    cli = placement(b, "show", "--interval", "0.2")     # the real command line
    assert [w["worker"] for w in cli["workers"]] == list(range(n))
    assert all(w["pid"] > 0 and w["cores"] for w in cli["workers"])
    assert sum(w["num_partitions"] for w in cli["workers"]) >= nparts


def test_list_offsets_and_delete_records_remote(mw_broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    b, n = mw_broker, mw_broker.num_workers
    topic = _topic(b, 2 * n)
    p = h.producer(b.bootstrap)
    for part in range(2 * n):
        for i in range(10 + part):
            p.produce(topic, b"x%d" % i, partition=part)
    h.flush(p)
    a = AdminClient(h.common_conf(b.bootstrap))
    futs = a.delete_records([TopicPartition(topic, part, 3) for part in range(2 * n)])
    for tp, f in futs.items():
        assert f.result(20).low_watermark == 3
    for k in range(3):
        c = h.consumer(b.bootstrap)
        for part in range(2 * n):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
            assert (lo, hi) == (3, 10 + part)
        c.close()


def test_long_poll_on_remote_partition_wakes_on_produce(two_workers):
    from confluent_kafka import Consumer, TopicPartition
    b = two_workers()
    topic = _topic(b, 2)
    own = owners(show(b), topic)
    # consumers until one's connection is on the worker that does NOT own partition 0
    remote = None
    made = []
    for k in range(10):
        cid = f"lp{k}-{uuid.uuid4().hex[:6]}"
        c = Consumer({**h.common_conf(b.bootstrap), "group.id": cid, "client.id": cid,
                      "enable.auto.commit": False, "auto.offset.reset": "latest",
                      "fetch.wait.max.ms": 10000, "fetch.min.bytes": 1})
        c.assign([TopicPartition(topic, 0)])
        made.append(c)
        deadline = time.monotonic() + 10
        workers = set()
        while time.monotonic() < deadline and not workers:
            c.poll(0.2)
            workers = client_worker(show(b, 0.05), cid)
        if workers and own[0] not in workers:
            remote = c
            break
    assert remote is not None, "no connection landed on the other worker in 10 tries"
    for c in made:
        if c is not remote:
            c.close()
    got = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            m = remote.poll(0.05)
            if m is not None and m.error() is None:
                got.append(time.monotonic())
    t = threading.Thread(target=poll, daemon=True)
    t.start()
    time.sleep(1.5)                           # the fetch is parked on the owner by now
    p = h.producer(b.bootstrap, **{"linger.ms": 0})
    p.produce(topic, b"wake", partition=0)
    t_ack = []
    p.poll(0)
    h.flush(p)
    t_ack.append(time.monotonic())
    deadline = time.monotonic() + 12
    while not got and time.monotonic() < deadline:
        time.sleep(0.005)
    stop.set()
    t.join(5)
    remote.close()
    assert got, "the long poll never answered"
    latency = got[0] - t_ack[0]
    print(f"long poll on a remote partition woke {latency * 1000:.1f} ms after the produce ack")
    assert latency < 0.25, f"long poll woke {latency * 1000:.0f} ms after the produce was acked"


def test_consumer_groups_with_remote_coordinators(mw_broker):
    from confluent_kafka import Consumer, TopicPartition
    b, n = mw_broker, mw_broker.num_workers
    topic = _topic(b, 2 * n)
    p = h.producer(b.bootstrap)
    for i in range(400):
        p.produce(topic, b"m%d" % i, partition=i % (2 * n))
    h.flush(p)
    # several groups: their coordinators are spread over the workers
    for g in range(3):
        group = f"grp-{g}-{uuid.uuid4().hex[:6]}"
        cs = [Consumer({**h.common_conf(b.bootstrap), "group.id": group, "client.id": f"{group}-{k}",
                        "auto.offset.reset": "earliest", "enable.auto.commit": False,
                        "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
              for k in range(2)]
        for c in cs:
            c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 40
        while len(got) < 400 and time.monotonic() < deadline:
            for c in cs:
                for m in c.consume(200, 0.2):
                    if m.error() is None:
                        got.append(m.value())
        assert sorted(got) == sorted(b"m%d" % i for i in range(400))
        from confluent_kafka import KafkaError, KafkaException
        for c in cs:
            try:
                c.commit(asynchronous=False)
            except KafkaException as e:   # a member that consumed nothing since a rebalance
                assert e.args[0].code() == KafkaError._NO_OFFSET
        for c in cs:
            c.close()
        # a new member reads the committed offsets (OffsetFetch through any front)
        c = Consumer({**h.common_conf(b.bootstrap), "group.id": group, "enable.auto.commit": False})
        committed = c.committed([TopicPartition(topic, i) for i in range(2 * n)], timeout=20)
        c.close()
        assert sum(tp.offset for tp in committed) == 400
    a = h.admin(b.bootstrap)
    listed = a.list_consumer_groups().result(20)
    assert len([g for g in listed.valid if g.group_id.startswith("grp-")]) >= 3


# ------------------------------------------------------------------ failures and moves
class Load:
    """An idempotent producer and a consumer running in threads."""

    def __init__(self, b, topic, nparts, rate_sleep=0.002):
        self.b, self.topic, self.nparts = b, topic, nparts
        self.acked: list[tuple[int, int, bytes, float]] = []
        self.errors = []
        self.stop = threading.Event()
        self.sleep = rate_sleep
        self.seq = 0
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        p = h.producer(self.b.bootstrap, **{"enable.idempotence": True, "acks": "all",
                                            "linger.ms": 1, "message.timeout.ms": 60000,
                                            "reconnect.backoff.ms": 50,
                                            "reconnect.backoff.max.ms": 500})

        def cb(err, msg):
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append((msg.partition(), msg.offset(), msg.value(), time.monotonic()))
        while not self.stop.is_set():
            part = self.seq % self.nparts
            p.produce(self.topic, b"%d:%d" % (part, self.seq), partition=part, on_delivery=cb)
            self.seq += 1
            p.poll(0)
            time.sleep(self.sleep)
        p.flush(60)

    def start(self):
        self.t.start()
        return self

    def finish(self):
        self.stop.set()
        self.t.join(90)


def read_all(b, topic, nparts, expect):
    c = h.consumer(b.bootstrap)
    h.assign_from_beginning(c, topic, nparts)
    msgs = h.consume(c, expect, timeout=60)
    c.close()
    return msgs


@pytest.mark.slow
def test_kill_one_worker_under_load(two_workers):
    b = two_workers({"worker.heartbeat.timeout.ms": 3000})
    nparts = 8
    topic = _topic(b, nparts)
    info = show(b)
    own = owners(info, topic)
    victim = 1
    old_pid = next(w["pid"] for w in info["workers"] if w["worker"] == victim)
    load = Load(b, topic, nparts).start()
    time.sleep(2)
    t_kill = time.monotonic()
    os.kill(old_pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    new_pid = None
    while time.monotonic() < deadline:
        try:
            w = next(w for w in show(b, 0.05, False)["workers"] if w["worker"] == victim)
            if w["pid"] != old_pid:
                new_pid = w["pid"]
                break
        except (AssertionError, StopIteration):
            pass
        time.sleep(0.2)
    assert new_pid, "the killed worker was not respawned"
    time.sleep(2)
    load.finish()
    assert not load.errors, load.errors[:5]
    # the surviving worker's partitions were served throughout (gaps are client retries)
    survivors = {p for p, w in own.items() if w != victim}
    times = sorted(t for part, _, _, t in load.acked if part in survivors and t > t_kill - 1)
    gaps = [b2 - a2 for a2, b2 in zip(times, times[1:])]
    assert times and max(gaps) < 6.0, f"surviving partitions stalled {max(gaps):.1f}s"
    # every acked message is in the log, at its offset
    msgs = read_all(b, topic, nparts, len(load.acked))
    stored = {(m.partition(), m.offset()): m.value() for m in msgs}
    for part, off, val, _ in load.acked:
        assert stored.get((part, off)) == val, (part, off)
    assert "respawning" in b.log_text()


@pytest.mark.slow
def test_sigterm_under_load_exits_cleanly_and_restart_skips_recovery(two_workers):
    b = two_workers()
    nparts = 6
    topic = _topic(b, nparts)
    load = Load(b, topic, nparts).start()
    time.sleep(2)
    rc = b.stop(timeout=40)
    load.stop.set()
    assert rc == 0
    assert "did not stop cleanly" not in b.log_text()
    dirs = [d for d in os.listdir(b.data_dir) if d.startswith(topic)]
    assert len(dirs) == nparts
    for d in dirs:        # every worker closed its own logs cleanly: no recovery on start
        assert os.path.exists(os.path.join(b.data_dir, d, ".kafka_cleanshutdown")), d
    b.start()
    load.t.join(90)       # what the producer still held is delivered to the new start
    assert not load.errors, load.errors[:5]
    acked = list(load.acked)
    msgs = read_all(b, topic, nparts, len(acked))
    stored = {(m.partition(), m.offset()): m.value() for m in msgs}
    for part, off, val, _ in acked:
        assert stored.get((part, off)) == val


@pytest.mark.slow
def test_placement_move_under_load_keeps_order(two_workers):
    b = two_workers()
    nparts = 2
    topic = _topic(b, nparts)
    own = owners(show(b), topic)
    load = Load(b, topic, nparts, rate_sleep=0.001).start()
    time.sleep(1)
    unavailable = []
    for k in range(4):
        target = 1 - owners(show(b, 0.05), topic)[0]
        res = placement(b, "move", f"{topic}-0", str(target))
        assert res["moved"] and res["moved"][0]["to"] == target
        unavailable.append(res["unavailable_ms"])
        time.sleep(0.7)
    load.finish()
    assert not load.errors, load.errors[:5]
    assert owners(show(b), topic)[0] == own[0]   # moved four times: back home
    n0 = sum(1 for part, *_ in load.acked if part == 0)
    msgs = [m for m in read_all(b, topic, nparts, len(load.acked)) if m.partition() == 0]
    values = [int(m.value().split(b":")[1]) for m in msgs]
    assert len(values) == n0 == len(set(values)), "lost or duplicated records"
    assert values == sorted(values), "records out of order"
    assert [m.offset() for m in msgs] == list(range(len(msgs)))
    print(f"unavailable during moves (ms): {unavailable}")
    # the move survives a restart (persisted placement)
    placement(b, "move", f"{topic}-1", str(1 - own[1]))
    b.restart()
    assert owners(show(b), topic)[1] == 1 - own[1]


def test_placement_config_pins_topic_and_balance(two_workers, tmp_path):
    name = f"pinned-{uuid.uuid4().hex[:6]}"
    b = two_workers({f"placement.{name}": 1})
    topic = _topic(b, 4, name=name)
    assert set(owners(show(b), topic).values()) == {1}
    p = h.producer(b.bootstrap)
    stop = time.monotonic() + 3
    i = 0
    res_holder = {}

    def run_balance():
        res_holder["r"] = placement(b, "balance", "--interval", "1.5")
    t = threading.Thread(target=run_balance)
    started = False
    while time.monotonic() < stop:
        p.produce(topic, b"x" * 1000, partition=i % 4)
        i += 1
        p.poll(0)
        if not started and time.monotonic() > stop - 2.5:
            t.start()
            started = True
        time.sleep(0.0005)
    h.flush(p)
    t.join(60)
    res = res_holder["r"]
    assert res["moves"], res
    after = owners(show(b), topic)
    assert set(after.values()) == {0, 1}
