"""Apache Kafka config keys that mpbroker accepts in `server.properties` and ignores.

A key in `server.properties` is one of three things (`mpbroker.config.BrokerConfig`):
a key mpbroker implements (`BROKER_CONFIGS`, the `placement.` prefix, or a
`listener.name.<listener>.` override of one), a key listed
here (a real Kafka broker key, or a Kafka client/tool key that people copy into broker
files, whose function mpbroker does not have or does differently: logged once at
INFO, "ignored"), or anything else (a typo: Kafka's "supplied but isn't a known config"
warning). Keys that would change what a client can rely on (an unknown
`authorizer.class.name`) are not here: the config refuses them.

The prefixes cover Kafka's families whose other members mpbroker ignores (the ssl.* and
sasl.* keys it does not read: JKS/keymanager algorithms, Kerberos, OAuth...; JMX/metrics
reporters; KRaft quorum settings; remote log storage; quotas per client).
A key that `BROKER_CONFIGS` defines is never "ignored", whatever this list says.
"""
from __future__ import annotations

IGNORED_PREFIXES = (
    "ssl.", "sasl.",          # the TLS/SASL keys mpbroker does not read (keys.py has the others)
    "metric.", "metrics.", "kafka.metrics.", "auto.include.jmx.reporter",
    "controller.quorum.", "metadata.log.", "metadata.max.", "raft.",   # KRaft
    "remote.log.", "log.local.retention.",        # tiered storage (KIP-405)
    "quota.", "client.quota.", "replication.quota.", "alter.log.dirs.replication.quota.",
    "confluent.", "telemetry.",
)

IGNORED_KEYS = frozenset("""
    advertised.host.name advertised.port host.name port
    alter.config.policy.class.name create.topic.policy.class.name
    principal.builder.class
    security.providers
    broker.heartbeat.interval.ms broker.session.timeout.ms
    controller.listener.names process.roles early.start.listeners
    initial.broker.registration.timeout.ms
    compression.gzip.buffer.size
    config.providers
    delegation.token.master.key delegation.token.secret.key
    delegation.token.expiry.time.ms delegation.token.max.lifetime.ms
    delegation.token.expiry.check.interval.ms
    group.coordinator.new.enable group.coordinator.rebalance.protocols
    group.coordinator.threads group.coordinator.append.linger.ms
    group.consumer.min.session.timeout.ms group.consumer.max.session.timeout.ms
    group.consumer.min.heartbeat.interval.ms group.consumer.max.heartbeat.interval.ms
    group.consumer.migration.policy
    group.share.enable share.coordinator.state.topic.num.partitions
    inter.broker.protocol.version log.message.format.version
    log.dir.failure.timeout.ms log.initial.task.delay.ms
    log.cleaner.backoff.max.ms
    max.connection.creation.rate
    max.request.partition.size.limit
    num.replica.alter.log.dirs.threads
    password.encoder.secret password.encoder.old.secret password.encoder.keyfactory.algorithm
    password.encoder.cipher.algorithm password.encoder.key.length password.encoder.iterations
    replica.selector.class replica.fetch.response.max.bytes.per.partition
    socket.connection.setup.timeout.ms socket.connection.setup.timeout.max.ms
    socket.listen.backlog.size
    transaction.state.log.load.buffer.size
    unstable.api.versions.enable unstable.feature.versions.enable
    zookeeper.clientCnxnSocket zookeeper.set.acl zookeeper.ssl.client.enable
    zookeeper.ssl.keystore.location zookeeper.ssl.keystore.password
    zookeeper.ssl.truststore.location zookeeper.ssl.truststore.password
    zookeeper.metadata.migration.enable
    bootstrap.servers client.id acks linger.ms batch.size key.serializer value.serializer
    key.deserializer value.deserializer group.id enable.auto.commit auto.offset.reset
    request.timeout.ms retries retry.backoff.ms
""".split())


def is_ignored(name: str) -> bool:
    """A Kafka key mpbroker knows and does not use (see the module doc)."""
    return name in IGNORED_KEYS or name.startswith(IGNORED_PREFIXES)
