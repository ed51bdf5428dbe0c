"""Several workers (`num.workers` 2 and 4): cross-worker routing and placement.

Connections land on workers at random (SO_REUSEPORT), so the tests open several clients
and, where it matters, ask the broker which worker served a client's connection
(`mpbroker placement show --json` lists each worker's connections with their client id)
and which worker owns a partition. Data is checked byte for byte against what was sent.
"""
from __future__ import annotations

import json
import os
import re
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


def placement_cli(b: h.Broker, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`mpbroker placement ARGS -c <the broker's config>` (the real command line)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(h.REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "mpbroker.cli.main", "placement", *args, "-c",
           str(b.config_path)]
    for k, v in b.overrides.items():
        cmd += ["--override", f"{k}={v}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=b.workdir)


def placement(b: h.Broker, *args: str, timeout: float = 60) -> dict:
    out = placement_cli(b, *args, "--json", timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def show(b: h.Broker, interval: float = 0.2, all_workers: bool = True) -> dict:
    """`placement show --json`; by default until every worker answers (one may boot)."""
    from mpbroker.cli.main import admin_call     # the CLI's own call, without a subprocess
    deadline = time.monotonic() + 30
    while True:
        info = admin_call(str(b.config_path), [f"{k}={v}" for k, v in b.overrides.items()],
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
    # the table: a header, then one row per worker with its pid, core and partitions
    out = placement_cli(b, "show", "--interval", "0.2", "--partitions")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert re.match(rf"placement revision \d+, {n} workers, rates over 0.2s$", lines[0]), lines
    assert lines[1].split() == ["worker", "pid", "core", "parts", "in", "out", "req/s",
                                "cpu%", "purg", "p/f/d", "conns"], lines[1]
    by_worker = {w["worker"]: w for w in cli["workers"]}
    for wid, row in zip(range(n), lines[2:2 + n]):
        cols = row.split()
        assert int(cols[0]) == wid and int(cols[1]) == by_worker[wid]["pid"], row
        assert cols[2] == ",".join(map(str, by_worker[wid]["cores"])), row
        assert float(cols[9]) >= 0.0 and "/s" in row, row               # cpu%, rates
    listed = {ln.split(":")[0].strip() for ln in lines[2 + n:]}
    assert {f"{topic}-{p}" for p in range(nparts)} <= listed


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


def _fetch_v12(topic: str, offset: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


async def _fetch_records(conn, topic: str, tries: int = 40) -> list[tuple[int, bytes, bytes]]:
    """[(offset, key, value)] of partition 0 from offset 0 on `conn` (retrying errors)."""
    import asyncio
    from storage.batch import iter_batches
    for _ in range(tries):
        resp = await conn.request(1, 12, _fetch_v12(topic))
        (d,) = resp["responses"][0]["partitions"]
        if d["error_code"] == 0 and d["records"]:
            return [(r.offset, r.key, r.value)
                    for bt in iter_batches(memoryview(bytes(d["records"])))
                    for r in bt.records()]
        await asyncio.sleep(0.25)
    raise AssertionError(f"fetch of {topic}-0 kept failing: error {d['error_code']}")


def test_remote_fetch_sends_the_new_file_after_delete_and_compaction(two_workers):
    """A front keeps handles on the files of other workers' slices per connection: after
    the topic is deleted and created again, or compaction swaps a cleaned segment in at
    the same path, the same connection must get the new file's bytes, never the old."""
    import asyncio
    from workers.kafka_client import KafkaConnection
    # connections stay on the front (no hand-off to the owner): its file handles are tested
    b = two_workers({"worker.connection.handoff": "false"})
    plain = _topic(b, 1)
    # compaction is switched on only after the first read (below)
    compacted = h.create_topic(b.bootstrap, f"mwc-{uuid.uuid4().hex[:8]}", 1,
                               config={"segment.bytes": 700})
    info = show(b)
    own = {t: owners(info, t)[0] for t in (plain, compacted)}

    def produce(topic, items):
        p = h.producer(b.bootstrap, **{"linger.ms": 0})
        for k, v in items:
            p.produce(topic, v, key=k, partition=0)
            p.flush(10)                       # one batch each: segments roll by size
        h.flush(p)

    produce(plain, [(b"k", b"OLD-%d" % i) for i in range(5)])
    produce(compacted, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(40)])
    seg0 = b.data_dir / f"{compacted}-0" / "00000000000000000000.log"
    before_ino = os.stat(seg0).st_ino

    async def main():
        conns, remote = [], {}
        for k in range(20):                   # connections on the non-owning worker
            cid = f"fdc-{k}-{uuid.uuid4().hex[:6]}"
            c = await KafkaConnection.connect(b.host, b.port, client_id=cid, timeout_ms=15000)
            conns.append(c)
            await c.request(18, 0, {})
            ws = client_worker(show(b, 0.05), cid)
            for t, w in own.items():
                if ws and w not in ws:
                    remote.setdefault(t, c)
            if len(remote) == 2:
                break
        assert len(remote) == 2, "no connection landed on the non-owning workers"
        # delete + create again: same path, new file
        old = await _fetch_records(remote[plain], plain)
        assert [v for _, _, v in old] == [b"OLD-%d" % i for i in range(5)]
        a = h.admin(b.bootstrap)
        a.delete_topics([plain], operation_timeout=30)[plain].result(30)
        deadline = time.monotonic() + 20
        while (b.data_dir / f"{plain}-0").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        h.create_topic(b.bootstrap, plain, 1)
        produce(plain, [(b"k", b"NEW-%d" % i) for i in range(3)])
        new = await _fetch_records(remote[plain], plain)
        assert [v for _, _, v in new] == [b"NEW-%d" % i for i in range(3)], new
        # compaction swaps the cleaned segment in at 00000000000000000000.log
        first = await _fetch_records(remote[compacted], compacted)
        assert [v for _, _, v in first][:40] == [b"v%d" % i for i in range(40)]
        from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                           ResourceType)
        res = ConfigResource(ResourceType.TOPIC, compacted, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("min.cleanable.dirty.ratio", "0.01",
                        incremental_operation=AlterConfigOpType.SET)])
        a.incremental_alter_configs([res], request_timeout=20)[res].result(20)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if os.stat(seg0).st_ino != before_ino:
                    break
            except FileNotFoundError:
                pass
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the compacted topic was never cleaned")
        again = await _fetch_records(remote[compacted], compacted)
        fresh_conn = await KafkaConnection.connect(b.host, b.port, client_id="fresh")
        fresh = await _fetch_records(fresh_conn, compacted)
        await fresh_conn.close()
        for c in conns:
            await c.close()
        return again, fresh

    again, fresh = asyncio.run(main())
    assert again == fresh
    latest = {}
    for off, k, v in again:
        latest[k] = v
    assert len(again) < 40 and latest == {b"k%d" % j: b"v%d" % (36 + j) for j in range(4)}
    assert [o for o, _, _ in again] == sorted({o for o, _, _ in again})


def test_long_poll_on_remote_partition_wakes_on_produce(two_workers):
    """...and the front reads the new batch from the owner's segment file itself: the
    owner published where it lies (workers/partition_states.py); the bytes still count
    as the owner's partition's bytes out."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.integration.test_metrics import scrape, series, value
    metrics_port = h.free_port()
    # the consumer stays on the front (no hand-off to the owner): the front's long poll
    # is tested
    b = two_workers({"metrics.listener": f"http://127.0.0.1:{metrics_port}",
                     "worker.connection.handoff": "false"})
    topic = _topic(b, 2)
    own = owners(show(b), topic)
    # consumers until one's connections are all on the worker that does NOT own
    # partition 0: the kernel spreads each connection (bootstrap, broker, coordinator)
    # over the two workers by hash, so one try in 4 to 8 succeeds; 40 tries fail about
    # once in 200 runs at worst (10 tries failed in one full suite run)
    remote = None
    made = []
    for k in range(40):
        cid = f"lp{k}-{uuid.uuid4().hex[:6]}"
        c = Consumer({**h.common_conf(b.bootstrap), "group.id": cid, "client.id": cid,
                      "enable.auto.commit": False,
                      # far longer than the wait below: an answer within it is the wake-up
                      "fetch.wait.max.ms": 60000, "socket.timeout.ms": 90000,
                      "fetch.min.bytes": 1})
        c.assign([TopicPartition(topic, 0, 0)])      # from 0: the record produced below
        made.append(c)
        deadline = time.monotonic() + 10
        workers = set()
        while time.monotonic() < deadline and not workers:
            c.poll(0.2)
            workers = client_worker(show(b, 0.05), cid)
        if workers and own[0] not in workers:
            remote = c
            break
    assert remote is not None, "no client's connections all landed on the other worker in 40 tries"
    for c in made:
        if c is not remote:
            c.close()
    got = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            m = remote.poll(0.05)
            if m is not None and m.error() is None:
                got.append(m.value())
    t = threading.Thread(target=poll, daemon=True)
    t.start()

    def parked_on_front():
        # the front parks the Fetch itself and watches partition 0 through the state
        # its owner publishes (workers/partition_states.py). (The owner may hold the
        # parked fetches of the consumers closed above until they expire.)
        ws = {w["worker"]: w["purgatory"]["fetch"] for w in show(b, 0.05)["workers"]}
        return any(n > 0 for w, n in ws.items() if w != own[0])
    h.wait_until(parked_on_front, 20, "the fetch parked on its front", b)
    p = h.producer(b.bootstrap, **{"linger.ms": 0})
    p.produce(topic, b"wake", partition=0)
    h.flush(p)
    try:
        # the parked fetch waits up to 60 s: an answer within 20 s is the produce waking it
        h.wait_until(lambda: got, 20, "the long poll to answer", b, step=0.01)
    finally:
        stop.set()
        t.join(5)
        remote.close()
    assert got == [b"wake"]
    m = scrape(metrics_port)
    reads = {dict(lbl)["worker"]: v for lbl, v in
             series(m, "mpbroker_worker_peer_file_reads_total").items()}
    assert reads[str(own[0])] == 0 and sum(reads.values()) >= 1     # read by the front
    # the front tells the owner within a second: the topic's bytes out has the batch
    h.wait_until(lambda: value(scrape(metrics_port), "kafka_server_brokertopicmetrics_bytesout_total",
                               topic=topic) > len(b"wake"), 10, "the bytes out counted", b)


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
        # nothing is committed while the two members split the partitions, so a
        # partition the first member read before the rebalance is read again by the
        # second one (at least once, as with Kafka): count records by (partition, offset)
        got = {}
        deadline = time.monotonic() + 40
        while len(got) < 400 and time.monotonic() < deadline:
            for c in cs:
                for m in c.consume(200, 0.2):
                    if m.error() is None:
                        assert got.setdefault((m.partition(), m.offset()), m.value()) == m.value()
        assert sorted(got.values()) == sorted(b"m%d" % i for i in range(400))
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
    """An idempotent producer and a consumer (every partition, from the beginning)
    running in threads for the whole test. `finish` stops the producer, lets the
    consumer catch up with everything acked, and `check_stream` checks what it read."""

    def __init__(self, b, topic, nparts, rate_sleep=0.002):
        self.b, self.topic, self.nparts = b, topic, nparts
        self.acked: list[tuple[int, int, bytes, float]] = []
        self.errors = []
        self.consumed: list[tuple[int, int, bytes, float]] = []
        self.stop = threading.Event()
        self.stop_consumer = threading.Event()
        self.sleep = rate_sleep
        self.seq = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.ct = threading.Thread(target=self.consume, daemon=True)

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
            time.sleep(self.sleep)          # the load's pace (not a wait for anything)
        p.flush(60)

    def consume(self):
        c = h.consumer(self.b.bootstrap, **{"reconnect.backoff.ms": 50,
                                            "reconnect.backoff.max.ms": 500})
        h.assign_from_beginning(c, self.topic, self.nparts)
        try:
            while not self.stop_consumer.is_set():
                for m in c.consume(500, 0.1):
                    if m.error() is None:     # errors: retried by the client (transport)
                        self.consumed.append((m.partition(), m.offset(), m.value(),
                                              time.monotonic()))
        finally:
            c.close()

    def start(self):
        self.ct.start()
        self.t.start()
        return self

    def wait_acked(self, n, timeout=30):
        """Until `n` records are acked in all (the load is flowing)."""
        h.wait_until(lambda: len(self.acked) >= n, timeout, f"{n} acked records", self.b)

    def finish(self, timeout=60):
        self.stop.set()
        self.t.join(90)
        want = {(p, o) for p, o, _, _ in self.acked}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and \
                not want <= {(p, o) for p, o, _, _ in self.consumed}:
            time.sleep(0.2)
        self.stop_consumer.set()
        self.ct.join(30)

    def check_stream(self):
        """The consumer's stream: per partition in offset order with no record twice (by
        offset and by the producer's sequence number), and every acked record in it."""
        per: dict[int, list] = {}
        for part, off, val, _ in self.consumed:
            per.setdefault(part, []).append((off, int(val.split(b":")[1])))
        for part, items in per.items():
            offs = [o for o, _ in items]
            seqs = [q for _, q in items]
            assert offs == sorted(set(offs)), f"partition {part}: offsets out of order or repeated"
            assert seqs == sorted(set(seqs)), f"partition {part}: records out of order or repeated"
        got = {(part, off): val for part, off, val, _ in self.consumed}
        missing = [(part, off) for part, off, val, _ in self.acked if got.get((part, off)) != val]
        assert not missing, f"{len(missing)} acked records not consumed, e.g. {missing[:5]}"


def check_log(msgs, acked):
    """The stored log (read back at the end): every acked record at its offset, no
    producer sequence number twice in a partition (idempotence held)."""
    stored = {(m.partition(), m.offset()): m.value() for m in msgs}
    for part, off, val, _ in acked:
        assert stored.get((part, off)) == val, (part, off)
    seqs: dict[int, list] = {}
    for m in msgs:
        seqs.setdefault(m.partition(), []).append(int(m.value().split(b":")[1]))
    for part, q in seqs.items():
        assert len(q) == len(set(q)), f"partition {part}: duplicated records in the log"
        assert q == sorted(q), f"partition {part}: records out of order in the log"


RECOVERY = re.compile(r"worker (\d+): skipped recovery of (\d+) logs \(clean shutdown\), "
                      r"recovered (\d+) logs")


def recovery_lines(text: str) -> list[tuple[int, int, int]]:
    """(worker, logs that skipped recovery, logs recovered) per worker start in the log."""
    return [tuple(map(int, m)) for m in RECOVERY.findall(text)]


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
    load.wait_acked(500)
    log_at_kill = b.log_size()
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
    t_respawn = time.monotonic()
    survivors = {p for p, w in own.items() if w != victim}
    # the respawned worker's partitions take writes again
    h.wait_until(lambda: any(part not in survivors and t > t_respawn
                             for part, _, _, t in list(load.acked)),
                 30, "acks from the respawned worker's partitions", b)
    load.finish()
    assert not load.errors, load.errors[:5]
    # the surviving worker's partitions were served after the kill, to the producer and
    # to the consumer (how long a client's retries paused them is a loadtest/ question)
    for what, events in (("produce acks", load.acked), ("consumed", load.consumed)):
        assert any(part in survivors and t > t_kill for part, _, _, t in events), what
    load.check_stream()
    # every acked message is in the log, at its offset, once
    check_log(read_all(b, topic, nparts, len(load.acked)), load.acked)
    assert "respawning" in b.log_text()
    # the respawned worker found no clean-shutdown markers on the victim's logs
    (respawn,) = [r for r in recovery_lines(b.log_text(log_at_kill)) if r[0] == victim]
    assert respawn[2] >= sum(1 for w in own.values() if w == victim), respawn


@pytest.mark.slow
def test_sigterm_under_load_exits_cleanly_and_restart_skips_recovery(two_workers):
    b = two_workers()
    nparts = 6
    topic = _topic(b, nparts)
    load = Load(b, topic, nparts).start()
    load.wait_acked(500)
    rc = b.stop(timeout=40)
    load.stop.set()
    assert rc == 0
    assert "did not stop cleanly" not in b.log_text()
    dirs = [d for d in os.listdir(b.data_dir) if d.startswith(topic)]
    assert len(dirs) == nparts
    for d in dirs:        # every worker closed its own logs cleanly
        assert os.path.exists(os.path.join(b.data_dir, d, ".kafka_cleanshutdown")), d
    log_at_restart = b.log_size()
    b.start()
    # ... so no worker recovers a log on the restart: every one skipped recovery
    deadline = time.monotonic() + 10
    while len(recovery_lines(b.log_text(log_at_restart))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = recovery_lines(b.log_text(log_at_restart))
    assert sorted(w for w, _, _ in lines) == [0, 1], lines
    assert all(recovered == 0 for _, _, recovered in lines), lines
    assert sum(skipped for _, skipped, _ in lines) >= nparts, lines
    load.finish()         # what the producer still held is delivered to the new start
    assert not load.errors, load.errors[:5]
    load.check_stream()
    check_log(read_all(b, topic, nparts, len(load.acked)), load.acked)


@pytest.mark.slow
def test_placement_move_under_load_keeps_order(two_workers):
    b = two_workers()
    nparts = 2
    topic = _topic(b, nparts)
    own = owners(show(b), topic)
    load = Load(b, topic, nparts, rate_sleep=0.001).start()
    load.wait_acked(300)
    unavailable = []
    for k in range(4):
        target = 1 - owners(show(b, 0.05), topic)[0]
        res = placement(b, "move", f"{topic}-0", str(target))
        assert res["moved"] and res["moved"][0]["to"] == target
        unavailable.append(res["unavailable_ms"])
        t_moved = time.monotonic()
        h.wait_until(lambda: any(part == 0 and t > t_moved for part, _, _, t in list(load.acked)),
                     30, "partition 0 acked at its new owner", b)
    load.finish()
    assert not load.errors, load.errors[:5]
    load.check_stream()
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


def test_placement_balance_by_load_keeps_config_pins(two_workers):
    """`placement balance` moves by measured load and leaves partitions that the config
    pins where they are. The load is uneven: the pinned topic and the two partitions of
    the free topic that share worker 1 with it carry it all, the free topic's partitions
    on worker 0 none. By count (4 partitions on worker 1, 2 on worker 0) one move would
    do; by load both busy free partitions go to worker 0, and the pinned ones stay."""
    name = f"pinned-{uuid.uuid4().hex[:6]}"
    b = two_workers({f"placement.{name}": 1})
    pinned = _topic(b, 2, name=name)
    free = _topic(b, 4)
    own = owners(show(b), free)
    assert set(owners(show(b), pinned).values()) == {1}
    busy = sorted(p for p, w in own.items() if w == 1)
    idle = sorted(p for p, w in own.items() if w == 0)
    assert len(busy) == len(idle) == 2, own           # the default spread
    # an explicit move of a pinned partition is refused without --include-pinned
    refused = placement_cli(b, "move", f"{pinned}-0", "0")
    assert refused.returncode == 1 and "pinned to worker 1" in refused.stderr, refused.stderr
    p = h.producer(b.bootstrap)
    targets = [(pinned, 0), (pinned, 1)] + [(free, q) for q in busy]
    res_holder = {}
    t = threading.Thread(target=lambda: res_holder.setdefault(
        "r", placement(b, "balance", "--interval", "1.5")))
    stop = time.monotonic() + 3
    i = 0
    while time.monotonic() < stop:
        topic, part = targets[i % len(targets)]
        p.produce(topic, b"x" * 1000, partition=part)
        i += 1
        p.poll(0)
        if i == 500:
            t.start()
        time.sleep(0.0005)                  # the load's pace (not a wait for anything)
    h.flush(p)
    t.join(60)
    res = res_holder["r"]
    assert sorted((m["topic"], m["partition"], m["to"]) for m in res["moves"]) == \
        [(free, q, 0) for q in busy], res
    assert res["pinned_kept"] == [f"{pinned}-0", f"{pinned}-1"], res
    info = show(b)
    assert set(owners(info, pinned).values()) == {1}
    assert owners(info, free) == {q: 0 for q in range(4)}


def test_tailing_consumers_across_segment_rolls_and_aborts_get_every_record_once(two_workers):
    """Consumers tail every partition (so some are always another worker's) while a
    producer appends across many small segments and a transactional producer commits and
    aborts: the fronts read the owners' files where the published state says where, and
    ask the owners across rolls and aborted transactions. Each consumer gets exactly what
    its isolation level shows, each record once, in offset order."""
    from confluent_kafka import KafkaError

    from tests.integration.test_metrics import scrape, series
    port = h.free_port()
    b = two_workers({"metrics.listener": f"http://127.0.0.1:{port}"})
    nparts = 4
    topic = f"mw-roll-{uuid.uuid4().hex[:8]}"
    h.create_topic(b.bootstrap, topic, nparts, config={"segment.bytes": 16384})
    consumers = {}
    for iso in ("read_uncommitted", "read_committed", "read_committed"):
        c = h.consumer(b.bootstrap, **{"isolation.level": iso, "fetch.wait.max.ms": 500,
                                       "client.id": f"tail-{len(consumers)}"})
        h.assign_from_beginning(c, topic, nparts)
        c.poll(0.5)                      # assigned and fetching: the tail from the start
        consumers[(iso, len(consumers))] = c
    plain, committed, aborted = [], [], []
    failed: list = []           # (producer, error)

    def delivered(err, msg):
        if err is None:
            plain.append(msg.value())
        else:
            failed.append(("plain", err))

    def produce_plain():
        # batches under segment.bytes: a loaded machine lets the producer gather larger
        # ones, which the broker refuses as Kafka does (RECORD_LIST_TOO_LARGE)
        p = h.producer(b.bootstrap, **{"linger.ms": 1, "client.id": "plain",
                                       "batch.size": 8192})
        for i in range(1500):
            p.produce(topic, b"p%05d-" % i + os.urandom(200), partition=i % nparts,
                      on_delivery=delivered)
            if i % 50 == 0:
                p.poll(0)
                time.sleep(0.005)       # spread over many fetches and segment rolls
        p.flush(60)

    def produce_txn():
        try:
            txns()
        except Exception as e:      # shown by the assertion below
            failed.append(("txn", e))

    def txns():
        p = h.producer(b.bootstrap, **{"transactional.id": f"tx-{uuid.uuid4().hex[:6]}",
                                       "linger.ms": 1, "client.id": "txn"})
        p.init_transactions(30)
        for t in range(12):
            p.begin_transaction()
            vals = [b"t%02d-%03d" % (t, i) for i in range(20)]
            for i, v in enumerate(vals):
                p.produce(topic, v, partition=i % nparts)
            if t % 2:
                h.flush(p)              # in the log, then aborted (not purged unsent)
                p.abort_transaction(30)
                aborted.extend(vals)
            else:
                p.commit_transaction(30)
                committed.extend(vals)
            time.sleep(0.02)
    threads = [threading.Thread(target=produce_plain), threading.Thread(target=produce_txn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not failed and len(plain) == 1500, failed[:5]
    want = {"read_uncommitted": sorted(plain + committed + aborted),
            "read_committed": sorted(plain + committed)}
    try:
        for (iso, _), c in consumers.items():
            got, offsets = [], {}
            deadline = time.monotonic() + 60
            while len(got) < len(want[iso]) and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                last = offsets.get(m.partition(), -1)
                assert m.offset() > last, (iso, m.partition(), m.offset(), last)
                offsets[m.partition()] = m.offset()
                got.append(m.value())
            assert sorted(got) == want[iso], (iso, len(got), len(want[iso]))
    finally:
        for c in consumers.values():
            c.close()
    reads = sum(series(scrape(port), "mpbroker_worker_peer_file_reads_total").values())
    assert reads > 0            # some partitions of every consumer were another worker's
