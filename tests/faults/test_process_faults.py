"""Process faults: a failing handler, a stopped worker, a killed worker, real clients.

* A handler that fails on a full disk (a tmpfs this test mounts, filled up) answers its
  API's error code and the connection stays usable: CreateTopics, FindCoordinator,
  DeleteTopics and a Metadata pipelined on one connection are all answered, in order;
  confluent-kafka's AdminClient gets KAFKA_STORAGE_ERROR instead of waiting forever.
* A worker stopped with SIGSTOP leaves the SO_REUSEPORT listener group within seconds
  (the supervisor's WARNING), so new connections of real clients opened during the stop
  are all served in bounded time; when it resumes it rejoins.
* SIGSTOP then SIGKILL of workers under an idempotent acks=all producer with a ledger
  of unique values: every acknowledged value is read back once (0 lost, 0 duplicated).
"""
from __future__ import annotations

import asyncio
import os
import re
import signal
import time
import uuid
from contextlib import contextmanager

import pytest

from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode as E
from tests.conftest import require
from tests.faults.conftest import fill
from tests.integration import broker as h
from tests.integration.conftest import fresh_broker  # noqa: F401  (fixture)
from workers.kafka_client import KafkaConnection

pytestmark = pytest.mark.slow

SERVING = re.compile(rb"worker (\d+) \(pid (\d+)\) serving on")
EVICTED = re.compile(rb"worker (\d+) missed heartbeats for (\d+) ms: taken out of the listener group")


def worker_pids(b) -> dict[int, int]:
    """worker id -> pid of its latest incarnation, from the broker's log."""
    return {int(w): int(p) for w, p in SERVING.findall(b.log_path.read_bytes())}


wait_until = h.wait_until


@contextmanager
def stopped(pid: int):
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- A: failing handlers
@pytest.fixture
def full_tmpfs(tmp_path, request):
    require("root", None if os.geteuid() == 0 else "mounting a tmpfs needs root")
    return request.getfixturevalue("mounts").tmpfs(tmp_path / "mnt", 16)


def test_handlers_failing_on_a_full_disk_answer_and_keep_the_connection(fresh_broker, full_tmpfs):
    b = fresh_broker({"log.dirs": str(full_tmpfs / "data"), "num.workers": 2})
    filler = fill(full_tmpfs)
    mark = b.log_size()

    async def pipelined():
        conn = await KafkaConnection.connect(b.host, b.port, client_id="faults", timeout_ms=20000)
        try:
            reqs = [
                conn.request(K.CREATE_TOPICS, 7, {"topics": [{
                    "name": "full-1", "num_partitions": 2, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout_ms": 5000,
                    "validate_only": False}),
                conn.request(K.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g1"]}),
                conn.request(K.DELETE_TOPICS, 6, {"topics": [{"name": "full-1",
                                                              "topic_id": bytes(16)}],
                                                  "timeout_ms": 5000}),
                conn.request(K.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False}),
            ]
            return await asyncio.wait_for(asyncio.gather(*reqs), 30)
        finally:
            await conn.close()

    created, coord, deleted, md = asyncio.run(pipelined())
    assert [(t["name"], t["error_code"]) for t in created["topics"]] == \
        [("full-1", E.KAFKA_STORAGE_ERROR)]
    assert "No space left" in created["topics"][0]["error_message"]
    assert [(c["key"], c["error_code"]) for c in coord["coordinators"]] == \
        [("g1", E.COORDINATOR_NOT_AVAILABLE)]
    assert [t["name"] for t in deleted["responses"]] == ["full-1"]   # answered (no topic)
    assert md["brokers"] and md["topics"] == []
    warnings = [line for line in b.log_text(mark).splitlines()
                if " WARNING " in line and "No space left on device" in line]
    assert any("create_topics" in w or "CreateTopics" in w for w in warnings), warnings

    # a real client is answered (not left waiting for its request timeout)
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic
    a = h.admin(b.bootstrap)
    fut = a.create_topics([NewTopic("full-2", 1, 1)], request_timeout=20)["full-2"]
    with pytest.raises(KafkaException) as err:
        fut.result(25)
    # the broker's answer, not the client's request timeout (REQUEST_TIMED_OUT)
    assert err.value.args[0].name() == "KAFKA_STORAGE_ERROR"
    # room again: the same broker serves the same request
    filler.unlink()
    h.create_topic(b.bootstrap, "full-3", partitions=2)
    assert b.is_alive()


# ---------------------------------------------------------------- B: a stalled worker
def _new_client_roundtrip(bootstrap: str, timeout: float, keep: list | None = None) -> float:
    """A new confluent-kafka client (new connections): its Metadata answered; seconds.
    The client is kept open in `keep` when given (its connections stay established)."""
    t0 = time.monotonic()
    a = h.admin(bootstrap, **{"socket.connection.setup.timeout.ms": int(timeout * 1000)})
    md = a.list_topics(timeout=timeout)
    assert md.brokers
    if keep is not None:
        keep.append(a)
    return time.monotonic() - t0


def test_a_stopped_worker_stops_getting_new_connections_and_rejoins(fresh_broker):
    b = fresh_broker({"num.workers": 2, "worker.listener.eviction.ms": 2000})
    pids = wait_until(lambda: len(worker_pids(b)) == 2 and worker_pids(b), 30, "2 workers", b)
    mark = b.log_size()
    took = []
    with stopped(pids[1]):
        t_stop = time.monotonic()
        # new clients for ~10 s (5 at least): each must be served, within the client's
        # own timeout (its Metadata call raises otherwise)
        while len(took) < 5 or time.monotonic() - t_stop < 10:
            took.append(_new_client_roundtrip(b.bootstrap, timeout=8))
        evicted = EVICTED.search(b.log_path.read_bytes()[mark:])
    assert evicted and int(evicted.group(1)) == 1, b.log_text(mark)
    assert int(evicted.group(2)) >= 2000        # not before worker.listener.eviction.ms
    b.wait_for_log("worker 1 beats again", mark, timeout=10)
    assert worker_pids(b) == pids           # not killed: the heartbeat timeout is 30 s
    # back in the group: both workers accept again (each connection lands on one)
    seen: set = set()
    clients: list = []
    for _ in range(40):
        _new_client_roundtrip(b.bootstrap, timeout=8, keep=clients)
        seen = _accepting_workers(b, pids)
        if seen == {0, 1}:
            break
    assert seen == {0, 1}


def _accepting_workers(b, pids) -> set[int]:
    """Workers with an established client connection on the broker's port (from /proc)."""
    import psutil
    out = set()
    for wid, pid in pids.items():
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.laddr and c.laddr.port == b.port and c.status == psutil.CONN_ESTABLISHED
               for c in conns):
            out.add(wid)
    return out


def test_sigstop_and_sigkill_of_workers_under_acks_all_lose_nothing(fresh_broker):
    b = fresh_broker({"num.workers": 2, "worker.listener.eviction.ms": 2000})
    pids = wait_until(lambda: len(worker_pids(b)) == 2 and worker_pids(b), 30, "2 workers", b)
    topic = f"ledger-{uuid.uuid4().hex[:8]}"
    h.create_topic(b.bootstrap, topic, partitions=4)
    p = h.producer(b.bootstrap, **{"enable.idempotence": True, "acks": "all",
                                   "message.timeout.ms": 60000})
    acked: list[bytes] = []
    failed: list = []

    def on_delivery(err, msg):
        (failed if err is not None else acked).append(err or msg.value())

    sent = 0

    def produce_for(seconds: float, rate: int = 200):
        nonlocal sent
        end = time.monotonic() + seconds
        while time.monotonic() < end and sent < 20000:
            for _ in range(rate // 20):
                p.produce(topic, value=b"v-%d" % sent, on_delivery=on_delivery)
                sent += 1
            p.poll(0.05)

    produce_for(2)
    with stopped(pids[0]):
        produce_for(4)
    produce_for(2)
    os.kill(pids[1], signal.SIGKILL)
    produce_for(3)
    wait_until(lambda: worker_pids(b).get(1, pids[1]) != pids[1], 30, "worker 1 respawned", b)
    produce_for(2)
    assert p.flush(60) == 0
    assert not failed, failed[:5]
    assert len(acked) == sent

    c = h.consumer(b.bootstrap)
    try:
        h.assign_from_beginning(c, topic, 4)
        got = [m.value() for m in h.consume(c, len(acked), timeout=60)]
        got += [m.value() for m in h.consume(c, 1, timeout=2)]      # nothing more
    finally:
        c.close()
    lost = set(acked) - set(got)
    dupes = len(got) - len(set(got))
    assert not lost and dupes == 0, (len(lost), dupes, sorted(lost)[:5])
