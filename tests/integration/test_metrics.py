"""Metrics, process titles and the request log, on the real broker with real clients.

One broker (two workers) with `metrics.listener` and `log.requests=true`: produce N
records with confluent-kafka, consume them all in a group, commit chosen offsets, scrape
`/metrics` and check its figures against what the test did (parsed with
prometheus_client's own parser)."""
from __future__ import annotations

import time
import urllib.request

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.integration import broker as harness
from tests.integration.broker import free_port

pytestmark = pytest.mark.skipif(harness.external_bootstrap() is not None,
                                reason="needs our own broker (metrics.listener)")

N = 300
PARTITIONS = 3
VALUE = b"v" * 100
GROUP = "metrics-group"


def scrape(port: int) -> dict:
    """{(sample name, frozenset(labels)): value} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        assert r.status == 200
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(m: dict, name: str, **labels) -> float:
    return m[(name, frozenset((k, str(v)) for k, v in labels.items()))]


def series(m: dict, name: str, **labels) -> dict:
    """{labels dict as frozenset: value} of `name`'s samples having `labels`."""
    want = {(k, str(v)) for k, v in labels.items()}
    return {lbl: v for (n, lbl), v in m.items() if n == name and want <= lbl}


wait_for = harness.wait_until


@pytest.fixture
def metered(fresh_broker):
    port = free_port()
    b = fresh_broker({"metrics.listener": f"http://127.0.0.1:{port}", "num.workers": 2,
                      "log.requests": "true"})
    return b, port


def test_metrics_match_what_clients_did(metered, topic_name):
    b, port = metered
    harness.create_topic(b.bootstrap, topic_name, PARTITIONS, None)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(N):
        p.produce(topic_name, key=str(i).encode(), value=VALUE, partition=i % PARTITIONS)
    assert p.flush(30) == 0

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic_name, i, 0) for i in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + 60
        while got < N and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == N
        # the group commits part of each partition: lag = what is left unconsumed
        per_partition = N // PARTITIONS
        committed = {0: per_partition, 1: per_partition - 10, 2: 7}
        c.commit(offsets=[TopicPartition(topic_name, i, o) for i, o in committed.items()],
                 asynchronous=False)
    finally:
        c.close()

    m = scrape(port)
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == N
    bytes_in = value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic_name)
    # record batches: at least the values, at most values plus generous per-record overhead
    assert N * len(VALUE) < bytes_in < N * (len(VALUE) + 80)
    sizes = series(m, "kafka_log_log_size", topic=topic_name)
    assert len(sizes) == PARTITIONS
    assert sum(sizes.values()) == bytes_in        # every byte in is in the logs
    # everything was read at least once (what a front read from another worker's files
    # counts on that worker when the front tells it, within a second)
    wait_for(lambda: value(scrape(port), "kafka_server_brokertopicmetrics_bytesout_total",
                           topic=topic_name) >= bytes_in, 10, "every byte counted out", b)
    for i in range(PARTITIONS):
        assert value(m, "kafka_log_log_logendoffset", topic=topic_name, partition=i) == per_partition
        assert value(m, "kafka_consumergroup_current_offset", consumergroup=GROUP,
                     topic=topic_name, partition=i) == committed[i]
        assert value(m, "kafka_consumergroup_lag", consumergroup=GROUP, topic=topic_name,
                     partition=i) == per_partition - committed[i]

    produces = value(m, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produces > 0
    assert value(m, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produces
    assert value(m, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce",
                 le="+Inf") == produces
    assert value(m, "kafka_network_requestmetrics_requests_total", request="Fetch") > 0
    assert value(m, "kafka_network_requestmetrics_requests_total", request="OffsetCommit") >= 1
    assert value(m, "kafka_network_requestmetrics_requestqueuetimems_count", request="Fetch") > 0

    assert value(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(m, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(m, "kafka_server_replicamanager_isrshrinks_total") == 0
    for op in ("Produce", "Fetch", "DeleteRecords"):
        assert value(m, "kafka_server_delayedoperationpurgatory_purgatorysize",
                     delayedoperation=op) >= 0
    assert value(m, "mpbroker_workers_answering") == 2
    for w in (0, 1):
        assert value(m, "mpbroker_worker_cpu_seconds_total", worker=w) > 0
        assert value(m, "kafka_server_socket_server_metrics_connection_count",
                     listener="PLAINTEXT", worker=w) >= 0
    created = series(m, "kafka_server_socket_server_metrics_connection_creation_total")
    assert sum(created.values()) >= 2          # the producer's and the consumer's at least
    wait_for(lambda: all(v > 0 for v in series(
        scrape(port), "mpbroker_worker_event_loop_lag_seconds_count").values()),
        what="a loop-lag probe of every worker")

    # counters only grow: a second scrape sees at least the first one's figures
    m2 = scrape(port)
    assert value(m2, "kafka_network_requestmetrics_requests_total",
                 request="Produce") >= produces
    assert value(m2, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == N

    # the request log: one line per request with API, version, client, principal, partitions
    log = b.log_text(0)
    produce_lines = [ln for ln in log.splitlines()
                     if "kafka.request.logger" in ln and "api=Produce " in ln]
    assert produce_lines
    assert all("principal=User:ANONYMOUS" in ln and f"partitions={topic_name}-" in ln
               and "total_time_ms=" in ln and "client_id=rdkafka" in ln
               for ln in produce_lines)


def test_process_titles(metered):
    b, _ = metered
    sup = psutil.Process(b.proc.pid)
    want = {"mpbroker: supervisor", "mpbroker: controller",
            "mpbroker: worker 0", "mpbroker: worker 1"}

    def titles():       # a worker names itself as it starts: the broker may answer before
        return {p.cmdline()[0] for p in [sup, *sup.children()]}
    wait_for(lambda: titles() == want, what=f"process titles {want}")


def test_metrics_off_by_default(fresh_broker):
    b = fresh_broker({})
    assert "metrics served" not in b.log_text(0)
    assert "kafka.request.logger" not in b.log_text(0)


@pytest.mark.parametrize("bad", ["127.0.0.1:9644", "https://127.0.0.1:9644",
                                 "http://127.0.0.1:99999", "http://127.0.0.1"])
def test_bad_metrics_listener_exits_2(tmp_path, bad):
    cfg = tmp_path / "server.properties"
    cfg.write_text(f"log.dirs={tmp_path / 'data'}\nlisteners=PLAINTEXT://127.0.0.1:{free_port()}\n")
    r = harness.run_cli("serve", "-c", cfg, "--override", f"metrics.listener={bad}",
                        text=True, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr
    assert "metrics.listener" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_metrics_port_in_use_stops_the_broker(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        busy = s.getsockname()[1]
        b = harness.Broker(tmp_path / "b", {"metrics.listener": f"http://127.0.0.1:{busy}"},
                           name="busy-metrics")
        with pytest.raises(harness.BrokerStartError):
            b.start()
        try:
            assert b.proc.returncode not in (None, 0)
            assert "cannot serve metrics" in b.log_text(0)
        finally:
            b.kill()
