"""Locust load test for a Kafka-protocol broker (mpbroker, or any other), with confluent-kafka.

    locust -f loadtest/locustfile.py --host 127.0.0.1:9092                     # web UI on :8089
    locust -f loadtest/locustfile.py --headless -u 20 -r 5 -t 60s --host 127.0.0.1:9092 \\
           --csv out/run --html out/run.html ProducerUser ConsumerUser

Users (pick them by class name on the command line; all three run when none is named):

* `ProducerUser`: each task produces `--kafka-batch` records and waits for their
  delivery reports. One request event per record: type `produce`, name the topic,
  response time = produce() call to delivery report (ms), length = key + value bytes;
  a failed delivery is an event with its KafkaError as the exception.
* `ConsumerUser`: assign()-based consumer of every partition of the topic (no group
  membership; `group.id` is set only because librdkafka wants one, auto commit off).
  One request event per record: type `consume`, name the topic, response time = the
  record's end-to-end latency (consume time - the record's CreateTime, ms; producers
  and consumers must share a clock, i.e. one machine or NTP-synced machines),
  length = key + value bytes. Errors from consume() are events with the exception.
* `GroupConsumerUser`: the same, but subscribe()s as a member of `--kafka-group`
  (offsets committed by librdkafka's auto commit).

Options (each also from the environment variable in brackets; they show in the web UI):
the bootstrap servers are locust's own `--host` (`host:port[,host:port]`, an optional
`kafka://` or `PLAINTEXT://` prefix is dropped); `--kafka-topic` [KAFKA_TOPIC],
`--kafka-partitions` [KAFKA_PARTITIONS] (topic created at test start if missing),
`--kafka-record-size` [KAFKA_RECORD_SIZE], `--kafka-keys` [KAFKA_KEYS] (0: null keys,
N: keys drawn from N distinct values), `--kafka-acks` [KAFKA_ACKS],
`--kafka-compression` [KAFKA_COMPRESSION], `--kafka-linger-ms` [KAFKA_LINGER_MS],
`--kafka-batch` [KAFKA_BATCH], `--kafka-group` [KAFKA_GROUP],
`--kafka-offset-reset` [KAFKA_OFFSET_RESET], `--kafka-wait-ms` [KAFKA_WAIT_MS] and
`--kafka-config` [KAFKA_CONFIG] (extra librdkafka settings, `k=v,k=v`).

Concurrency: locust runs users as gevent greenlets in one OS thread; librdkafka does its
network I/O on its own native threads. Every librdkafka call made here is non-blocking
(produce, poll(0), consume(timeout=0)) and the waiting is done with gevent.sleep, so one
user never stalls the others. Every wait loop is bounded by `DELIVERY_TIMEOUT_S`.
"""

from __future__ import annotations

import os
import random
import time
import uuid

import gevent
from locust import User, events, task
from locust.runners import WorkerRunner

DELIVERY_TIMEOUT_S = 30.0   # a task gives up waiting for delivery reports after this long
POLL_SLEEP_S = 0.001        # gevent sleep between non-blocking librdkafka polls
CONSUME_BATCH = 500         # records taken from librdkafka per consume() call
TOPIC_READY_TIMEOUT_S = 30.0


# ---------------------------------------------------------------- command line


@events.init_command_line_parser.add_listener
def _add_arguments(parser) -> None:
    g = parser.add_argument_group("Kafka (loadtest/locustfile.py); the bootstrap servers are --host")
    g.add_argument("--kafka-topic", env_var="KAFKA_TOPIC", default="locust", help="topic (default: locust)")
    g.add_argument("--kafka-partitions", env_var="KAFKA_PARTITIONS", type=int, default=10,
                   help="partitions when the topic is created at test start (default 10)")
    g.add_argument("--kafka-record-size", env_var="KAFKA_RECORD_SIZE", type=int, default=1024,
                   help="value size in bytes (default 1024)")
    g.add_argument("--kafka-keys", env_var="KAFKA_KEYS", type=int, default=0,
                   help="0: null keys (sticky partitioner); N: keys drawn from N distinct values (default 0)")
    g.add_argument("--kafka-acks", env_var="KAFKA_ACKS", default="all", choices=["0", "1", "all", "-1"],
                   help="producer acks (default all)")
    g.add_argument("--kafka-compression", env_var="KAFKA_COMPRESSION", default="none",
                   choices=["none", "gzip", "snappy", "lz4", "zstd"], help="producer compression (default none)")
    g.add_argument("--kafka-linger-ms", env_var="KAFKA_LINGER_MS", type=float, default=5.0,
                   help="producer linger.ms (default 5)")
    g.add_argument("--kafka-batch", env_var="KAFKA_BATCH", type=int, default=100,
                   help="records a ProducerUser task produces before it waits for their delivery (default 100)")
    g.add_argument("--kafka-group", env_var="KAFKA_GROUP", default="locust",
                   help="consumer group of GroupConsumerUser (default: locust)")
    g.add_argument("--kafka-offset-reset", env_var="KAFKA_OFFSET_RESET", default="latest",
                   choices=["latest", "earliest"], help="where consumers start (default latest)")
    g.add_argument("--kafka-wait-ms", env_var="KAFKA_WAIT_MS", type=float, default=0.0,
                   help="pause between a user's tasks, ms (default 0: as fast as the broker goes)")
    g.add_argument("--kafka-config", env_var="KAFKA_CONFIG", default="",
                   help="extra librdkafka settings for every client, k=v,k=v")


def bootstrap_servers(host: str | None) -> str:
    """locust --host -> librdkafka bootstrap.servers."""
    servers = []
    for part in (host or "127.0.0.1:9092").split(","):
        part = part.strip().rstrip("/")
        if "://" in part:
            part = part.split("://", 1)[1]
        if part:
            servers.append(part)
    return ",".join(servers) or "127.0.0.1:9092"


def extra_config(text: str) -> dict:
    out = {}
    for item in (text or "").split(","):
        if item.strip():
            k, _, v = item.partition("=")
            out[k.strip()] = v.strip()
    return out


def client_config(environment) -> dict:
    o = environment.parsed_options
    conf = {"bootstrap.servers": bootstrap_servers(environment.host), "client.id": f"locust-{os.getpid()}"}
    conf.update(extra_config(getattr(o, "kafka_config", "")))
    return conf


# ---------------------------------------------------------------- topic at test start


def ensure_topic(bootstrap: str, topic: str, partitions: int, extra: dict) -> None:
    """Create `topic` unless it exists, and wait until every partition has a leader."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **extra})
    md = admin.list_topics(topic=None, timeout=10)
    if topic not in md.topics:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=30)[topic].result(30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        t = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} has no leader for every partition after {TOPIC_READY_TIMEOUT_S}s")


@events.test_start.add_listener
def _create_topic(environment, **_kw) -> None:
    # Workers get the topic from the master's start; creating it on every node would race.
    if isinstance(environment.runner, WorkerRunner):
        return
    o = environment.parsed_options
    ensure_topic(bootstrap_servers(environment.host), o.kafka_topic, o.kafka_partitions,
                 extra_config(o.kafka_config))


# ---------------------------------------------------------------- users


class KafkaUser(User):
    abstract = True

    def wait_time(self):  # --kafka-wait-ms, read at every wait so a change in the web UI applies
        return max(0.0, float(self.environment.parsed_options.kafka_wait_ms)) / 1000.0

    @property
    def options(self):
        return self.environment.parsed_options

    @property
    def topic(self) -> str:
        return self.options.kafka_topic

    def fire(self, operation: str, start: float, response_time_ms: float, length: int, exception=None) -> None:
        self.environment.events.request.fire(
            request_type=operation, name=self.topic, start_time=start, response_time=response_time_ms,
            response_length=length, exception=exception, context={})


class ProducerUser(KafkaUser):
    """Produces `--kafka-batch` records per task and waits for every delivery report."""

    weight = 2

    def on_start(self) -> None:
        from confluent_kafka import Producer

        o = self.options
        conf = client_config(self.environment)
        conf.update({"acks": o.kafka_acks, "compression.type": o.kafka_compression,
                     "linger.ms": o.kafka_linger_ms, "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000)})
        conf.update(extra_config(o.kafka_config))
        self.producer = Producer(conf)
        self.value = os.urandom(max(0, o.kafka_record_size))
        self.keys = [f"key-{i}".encode() for i in range(o.kafka_keys)]

    def on_stop(self) -> None:
        self._wait_for(lambda: len(self.producer) == 0)

    def _wait_for(self, done) -> bool:
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        while not done():
            self.producer.poll(0)
            if time.monotonic() > deadline:
                return False
            gevent.sleep(POLL_SLEEP_S)
        return True

    def _report(self, batch: list, start: float, t0: float, length: int):
        def on_delivery(err, _msg):
            rt = (time.perf_counter() - t0) * 1000.0
            self.fire("produce", start, rt, length, None if err is None else KafkaDeliveryError(err))
            batch[0] -= 1
        return on_delivery

    @task
    def produce_batch(self) -> None:
        n = max(1, self.options.kafka_batch)
        # This batch's own count of missing delivery reports: a late report of an earlier
        # batch that gave up waiting must not end this batch's wait early.
        pending = [0]
        for _ in range(n):
            key = random.choice(self.keys) if self.keys else None
            length = len(self.value) + (len(key) if key else 0)
            start, t0 = time.time(), time.perf_counter()
            while True:
                try:
                    self.producer.produce(self.topic, value=self.value, key=key,
                                          on_delivery=self._report(pending, start, t0, length))
                    pending[0] += 1
                    break
                except BufferError:  # local queue full: let deliveries drain, then retry
                    if not self._wait_for(lambda: len(self.producer) < 1000):
                        self.fire("produce", start, (time.perf_counter() - t0) * 1000.0, 0,
                                  TimeoutError("producer queue full"))
                        return
        if not self._wait_for(lambda: pending[0] <= 0):
            self.fire("produce", time.time(), DELIVERY_TIMEOUT_S * 1000.0, 0,
                      TimeoutError(f"{pending[0]} delivery reports missing after {DELIVERY_TIMEOUT_S}s"))


class KafkaDeliveryError(Exception):
    def __init__(self, err):
        super().__init__(str(err))
        self.kafka_error = err


class ConsumerUser(KafkaUser):
    """assign()-based consumer of every partition; response time = end-to-end latency."""

    weight = 1
    subscribe = False

    def consumer_config(self) -> dict:
        o = self.options
        conf = client_config(self.environment)
        conf.update({"group.id": f"locust-assign-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                     "auto.offset.reset": o.kafka_offset_reset, "enable.partition.eof": False})
        conf.update(extra_config(o.kafka_config))
        return conf

    def on_start(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

        self.consumer = Consumer(self.consumer_config())
        if self.subscribe:
            self.consumer.subscribe([self.topic])
            return
        md = self.consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        start = OFFSET_BEGINNING if self.options.kafka_offset_reset == "earliest" else OFFSET_END
        self.consumer.assign([TopicPartition(self.topic, p, start) for p in sorted(md.partitions)])

    def on_stop(self) -> None:
        self.consumer.close()

    @task
    def consume(self) -> None:
        start = time.time()
        try:
            msgs = self.consumer.consume(CONSUME_BATCH, timeout=0)
        except Exception as e:  # noqa: BLE001 - reported as a failed request
            self.fire("consume", start, 0.0, 0, e)
            gevent.sleep(POLL_SLEEP_S)
            return
        if not msgs:
            gevent.sleep(POLL_SLEEP_S)
            return
        now_ms = time.time() * 1000.0
        for m in msgs:
            err = m.error()
            if err is not None:
                self.fire("consume", start, 0.0, 0, KafkaDeliveryError(err))
                continue
            _, ts = m.timestamp()
            length = len(m.value() or b"") + len(m.key() or b"")
            self.fire("consume", start, max(0.0, now_ms - ts) if ts > 0 else 0.0, length)


class GroupConsumerUser(ConsumerUser):
    """Member of consumer group `--kafka-group` (subscribe, auto commit)."""

    weight = 1
    subscribe = True

    def consumer_config(self) -> dict:
        conf = super().consumer_config()
        conf.update({"group.id": self.options.kafka_group, "enable.auto.commit": True})
        conf.update(extra_config(self.options.kafka_config))
        return conf
