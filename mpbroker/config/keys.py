"""The key tables: every broker key (name, type, default, validator, importance,
update mode, documentation) and every topic key with its broker synonyms, in Kafka's
order. The one place a config default is written.

mpbroker's own broker keys: ``num.workers`` (default: CPUs usable by this process),
``worker.cpu.affinity``, ``worker.connection.handoff``, ``admin.socket``, ``max.incremental.fetch.session.cache.bytes``
(workers/fetch_session.py), and the free-form prefix ``placement.`` (e.g.
``placement.topic.<topic>=...``), kept as strings for the supervisor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mpbroker.config.listeners import SECURITY_PROTOCOLS
from mpbroker.config.types import DOUBLE_MAX, INT_MAX, LONG_MAX, ConfigType
from mpbroker.config.validators import (GzipLevel, HttpListener, ValidList, ValidString,
                                        Validator, at_least, between)

PLACEMENT_PREFIX = "placement."

@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: int
    default: Any                     # typed; None = null default
    validator: Optional[Validator]
    importance: str                  # "high" | "medium" | "low"
    doc: str
    update_mode: str = "read-only"   # "read-only" | "per-broker" | "cluster-wide"

    @property
    def sensitive(self) -> bool:
        return self.type == ConfigType.PASSWORD

    @property
    def dynamic(self) -> bool:
        return self.update_mode != "read-only"


# the table's columns, by name
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, PASSWORD = (
    ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG,
    ConfigType.DOUBLE, ConfigType.LIST, ConfigType.PASSWORD)
READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"   # update modes
HIGH, MEDIUM, LOW = "high", "medium", "low"                                        # importance
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")

_BROKER_TABLE = [
    # name, type, default, validator, importance, update mode, documentation
    ("broker.id", INT, -1, None, HIGH, READ_ONLY, "The broker id for this server. If unset (-1), a unique id is generated when broker.id.generation.enable is true."),
    ("node.id", INT, -1, None, HIGH, READ_ONLY, "The node id of this server; must equal broker.id when both are set."),
    ("broker.rack", STRING, None, None, MEDIUM, READ_ONLY, "Rack of the broker, used by rack-aware replica assignment."),
    ("listeners", STRING, "PLAINTEXT://:9092", None, HIGH, PER_BROKER, "Comma-separated listener URIs (NAME://host:port) the broker binds; an empty host binds the default interface, 0.0.0.0 all interfaces."),
    ("advertised.listeners", STRING, None, None, HIGH, PER_BROKER, "Listeners published to clients if different from listeners; 0.0.0.0 is not allowed. Defaults to listeners."),
    ("listener.security.protocol.map", STRING, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", None, LOW, PER_BROKER, "Map between listener names and security protocols."),
    ("inter.broker.listener.name", STRING, None, None, MEDIUM, READ_ONLY, "Listener used between brokers; defaults to the one matching security.inter.broker.protocol."),
    ("security.inter.broker.protocol", STRING, "PLAINTEXT", ValidString(SECURITY_PROTOCOLS), MEDIUM, READ_ONLY, "Security protocol used to communicate between brokers."),
    ("log.dir", STRING, "/tmp/kafka-logs", None, HIGH, READ_ONLY, "The directory in which the log data is kept (supplemental for log.dirs)."),
    ("log.dirs", STRING, None, None, HIGH, READ_ONLY, "Comma-separated directories for log data. If not set, log.dir is used. Relative paths are resolved against the current directory."),
    ("num.partitions", INT, 1, at_least(1), MEDIUM, READ_ONLY, "The default number of log partitions per topic."),
    ("default.replication.factor", INT, 1, None, MEDIUM, READ_ONLY, "The default replication factor for automatically created topics."),
    ("auto.create.topics.enable", BOOLEAN, True, None, HIGH, READ_ONLY, "Enable auto creation of topics on the server."),
    ("delete.topic.enable", BOOLEAN, True, None, HIGH, READ_ONLY, "Enables delete topic; deleting a topic has no effect when off."),
    ("log.segment.bytes", INT, 1024**3, at_least(14), HIGH, CLUSTER_WIDE, "The maximum size of a single log file."),
    ("log.roll.ms", LONG, None, None, HIGH, CLUSTER_WIDE, "Maximum time before a new log segment is rolled out (ms). If not set, log.roll.hours is used."),
    ("log.roll.hours", INT, 168, at_least(1), HIGH, READ_ONLY, "Maximum time before a new log segment is rolled out (hours), secondary to log.roll.ms."),
    ("log.roll.jitter.ms", LONG, None, None, HIGH, CLUSTER_WIDE, "Maximum jitter subtracted from the roll time (ms). If not set, log.roll.jitter.hours is used."),
    ("log.roll.jitter.hours", INT, 0, at_least(0), HIGH, READ_ONLY, "Maximum jitter subtracted from the roll time (hours), secondary to log.roll.jitter.ms."),
    ("log.index.size.max.bytes", INT, 10 * 1024 * 1024, at_least(4), MEDIUM, CLUSTER_WIDE, "The maximum size in bytes of the offset index."),
    ("log.index.interval.bytes", INT, 4096, at_least(0), MEDIUM, CLUSTER_WIDE, "The interval with which an entry is added to the offset index."),
    ("log.retention.ms", LONG, None, None, HIGH, CLUSTER_WIDE, "Time to keep a log file before deleting it (ms). If not set, log.retention.minutes is used; -1 means no limit."),
    ("log.retention.minutes", INT, None, None, HIGH, READ_ONLY, "Time to keep a log file (minutes), secondary to log.retention.ms. If not set, log.retention.hours is used."),
    ("log.retention.hours", INT, 168, None, HIGH, READ_ONLY, "Time to keep a log file (hours), tertiary to log.retention.ms."),
    ("log.retention.bytes", LONG, -1, None, HIGH, CLUSTER_WIDE, "The maximum size of the log before deleting it; -1 means no limit."),
    ("log.retention.check.interval.ms", LONG, 300000, at_least(1), MEDIUM, READ_ONLY, "How often the log cleaner checks whether any log is eligible for deletion."),
    ("log.flush.interval.messages", LONG, LONG_MAX, at_least(1), HIGH, CLUSTER_WIDE, "Number of messages accumulated on a log partition before they are flushed to disk."),
    ("log.flush.interval.ms", LONG, None, None, HIGH, CLUSTER_WIDE, "Maximum time a message stays in memory before flush (ms). If not set, log.flush.scheduler.interval.ms is used."),
    ("log.flush.scheduler.interval.ms", LONG, LONG_MAX, None, HIGH, READ_ONLY, "How often the log flusher checks whether any log needs to be flushed (ms)."),
    ("log.flush.offset.checkpoint.interval.ms", INT, 60000, at_least(0), HIGH, READ_ONLY, "How often the recovery point checkpoint is written."),
    ("log.flush.start.offset.checkpoint.interval.ms", INT, 60000, at_least(0), HIGH, READ_ONLY, "How often the log start offset checkpoint is written."),
    ("log.cleanup.policy", LIST, ["delete"], ValidList(CLEANUP_POLICIES), MEDIUM, CLUSTER_WIDE, "The default cleanup policy for segments beyond the retention window: delete and/or compact."),
    ("log.cleaner.enable", BOOLEAN, True, None, MEDIUM, READ_ONLY, "Enable the log cleaner process (needed for compacted topics, including __consumer_offsets)."),
    ("log.cleaner.threads", INT, 1, at_least(0), MEDIUM, CLUSTER_WIDE, "The number of background threads to use for log cleaning."),
    ("log.cleaner.io.max.bytes.per.second", DOUBLE, DOUBLE_MAX, None, MEDIUM, CLUSTER_WIDE, "The log cleaner's I/O throttle: read plus write bytes per second."),
    ("log.cleaner.dedupe.buffer.size", LONG, 128 * 1024 * 1024, None, MEDIUM, CLUSTER_WIDE, "Total memory used for log deduplication across all cleaner threads."),
    ("log.cleaner.io.buffer.size", INT, 512 * 1024, at_least(0), MEDIUM, CLUSTER_WIDE, "Total memory used for log cleaner I/O buffers across all cleaner threads."),
    ("log.cleaner.io.buffer.load.factor", DOUBLE, 0.9, None, MEDIUM, CLUSTER_WIDE, "Log cleaner dedupe buffer load factor."),
    ("log.cleaner.backoff.ms", LONG, 15000, at_least(0), MEDIUM, CLUSTER_WIDE, "The amount of time to sleep when there are no logs to clean."),
    ("log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, between(0, 1), MEDIUM, CLUSTER_WIDE, "Minimum ratio of dirty log to total log for a log to be eligible for cleaning."),
    ("log.cleaner.delete.retention.ms", LONG, 86400000, at_least(0), MEDIUM, CLUSTER_WIDE, "How long delete markers (tombstones) are retained for compacted topics."),
    ("log.cleaner.min.compaction.lag.ms", LONG, 0, at_least(0), MEDIUM, CLUSTER_WIDE, "The minimum time a message remains uncompacted in the log."),
    ("log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, at_least(1), MEDIUM, CLUSTER_WIDE, "The maximum time a message remains ineligible for compaction."),
    ("log.segment.delete.delay.ms", LONG, 60000, at_least(0), HIGH, CLUSTER_WIDE, "The amount of time to wait before deleting a file from the filesystem."),
    ("log.message.timestamp.type", STRING, "CreateTime", ValidString(TIMESTAMP_TYPES), MEDIUM, CLUSTER_WIDE, "Whether the timestamp in the message is the create time or the log append time."),
    ("log.message.timestamp.difference.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM, CLUSTER_WIDE, "[Deprecated] Maximum difference between the broker's timestamp and the message's timestamp."),
    ("log.message.timestamp.before.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM, CLUSTER_WIDE, "Maximum allowed time a message timestamp may be earlier than the broker's timestamp."),
    ("log.message.timestamp.after.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM, CLUSTER_WIDE, "Maximum allowed time a message timestamp may be later than the broker's timestamp."),
    ("produce.record.validation.enable", BOOLEAN, True, None, LOW, READ_ONLY, "mpbroker: check every record of a produced magic-2 batch as Kafka's LogValidator does (structure, count, decompression, per-record timestamps). false: for trusted producers only; the header, CRC-32C and compacted-topic keys are still checked, a malformed record is stored as sent."),
    ("log.message.downconversion.enable", BOOLEAN, True, None, LOW, CLUSTER_WIDE, "Whether down-conversion of message formats is enabled to satisfy consume requests."),
    ("log.preallocate", BOOLEAN, False, None, MEDIUM, CLUSTER_WIDE, "Preallocate the file on disk when creating a new log segment."),
    ("message.max.bytes", INT, 1024 * 1024 + 12, at_least(0), HIGH, CLUSTER_WIDE, "The largest record batch size allowed (after compression if compression is enabled)."),
    ("socket.request.max.bytes", INT, 100 * 1024 * 1024, at_least(1), HIGH, READ_ONLY, "The maximum number of bytes in a socket request."),
    ("socket.send.buffer.bytes", INT, 100 * 1024, None, HIGH, READ_ONLY, "SO_SNDBUF of server sockets; -1 uses the OS default."),
    ("socket.receive.buffer.bytes", INT, 100 * 1024, None, HIGH, READ_ONLY, "SO_RCVBUF of server sockets; -1 uses the OS default."),
    ("compression.type", STRING, "producer", ValidString(COMPRESSION_TYPES), HIGH, CLUSTER_WIDE, "The final compression type for a topic: a codec, 'uncompressed', or 'producer' to retain the producer's codec."),
    ("compression.gzip.level", INT, -1, GzipLevel(), MEDIUM, CLUSTER_WIDE, "The compression level to use if compression.type is gzip."),
    ("compression.lz4.level", INT, 9, between(1, 17), MEDIUM, CLUSTER_WIDE, "The compression level to use if compression.type is lz4."),
    ("compression.zstd.level", INT, 3, between(-131072, 22), MEDIUM, CLUSTER_WIDE, "The compression level to use if compression.type is zstd."),
    ("min.insync.replicas", INT, 1, at_least(1), HIGH, CLUSTER_WIDE, "Minimum number of in-sync replicas that must acknowledge a write with acks=all."),
    ("unclean.leader.election.enable", BOOLEAN, False, None, HIGH, CLUSTER_WIDE, "Whether replicas not in the ISR may be elected leader as a last resort, at the risk of data loss."),
    ("offsets.topic.num.partitions", INT, 50, at_least(1), HIGH, READ_ONLY, "The number of partitions of the offset commit topic (do not change after deployment)."),
    ("offsets.topic.replication.factor", SHORT, 3, at_least(1), HIGH, READ_ONLY, "The replication factor of the offsets topic."),
    ("offsets.topic.segment.bytes", INT, 100 * 1024 * 1024, at_least(1), HIGH, READ_ONLY, "The offsets topic segment bytes."),
    ("offsets.topic.compression.codec", INT, 0, None, HIGH, READ_ONLY, "Compression codec for the offsets topic."),
    ("offsets.load.buffer.size", INT, 5 * 1024 * 1024, at_least(1), HIGH, READ_ONLY, "Batch size for reading from the offsets segments when loading offsets."),
    ("offsets.retention.minutes", INT, 7 * 24 * 60, at_least(1), HIGH, READ_ONLY, "Committed offsets of a group are kept this long after the group becomes empty."),
    ("offsets.retention.check.interval.ms", LONG, 600000, at_least(1), HIGH, READ_ONLY, "Frequency at which to check for stale offsets."),
    ("offsets.commit.timeout.ms", INT, 5000, at_least(1), HIGH, READ_ONLY, "Offset commit is delayed until all replicas of the offsets topic receive the commit or this timeout is reached."),
    ("offsets.commit.required.acks", SHORT, -1, None, HIGH, READ_ONLY, "The required acks before the commit can be accepted."),
    ("offset.metadata.max.bytes", INT, 4096, None, HIGH, READ_ONLY, "The maximum size for a metadata entry associated with an offset commit."),
    ("group.initial.rebalance.delay.ms", INT, 3000, None, MEDIUM, READ_ONLY, "Time the group coordinator waits for more consumers to join a new group before the first rebalance."),
    ("group.min.session.timeout.ms", INT, 6000, None, MEDIUM, READ_ONLY, "The minimum allowed session timeout for registered consumers."),
    ("group.max.session.timeout.ms", INT, 1800000, None, MEDIUM, READ_ONLY, "The maximum allowed session timeout for registered consumers."),
    ("group.max.size", INT, INT_MAX, at_least(1), MEDIUM, READ_ONLY, "The maximum number of consumers that a single consumer group can accommodate."),
    ("transaction.state.log.num.partitions", INT, 50, at_least(1), HIGH, READ_ONLY, "The number of partitions for the transaction topic."),
    ("transaction.state.log.replication.factor", SHORT, 3, at_least(1), HIGH, READ_ONLY, "The replication factor for the transaction topic."),
    ("transaction.state.log.segment.bytes", INT, 100 * 1024 * 1024, at_least(1), HIGH, READ_ONLY, "The transaction topic segment bytes."),
    ("transaction.state.log.min.isr", INT, 2, at_least(1), HIGH, READ_ONLY, "min.insync.replicas for the transaction topic."),
    ("transactional.id.expiration.ms", INT, 604800000, at_least(1), HIGH, READ_ONLY, "Time the transaction coordinator waits without status updates before expiring a transactional id."),
    ("transaction.max.timeout.ms", INT, 900000, at_least(1), HIGH, READ_ONLY, "The maximum allowed timeout for transactions."),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, at_least(1), LOW, READ_ONLY, "The interval at which to roll back transactions that have timed out."),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000, at_least(1), LOW, READ_ONLY, "The interval at which to remove transactions that have expired due to transactional.id.expiration.ms passing."),
    ("transaction.partition.verification.enable", BOOLEAN, True, None, LOW, CLUSTER_WIDE, "KIP-890: a partition leader asks the transaction coordinator whether a transactional batch's partition was added to the transaction before appending it."),
    ("producer.id.expiration.ms", INT, 86400000, at_least(1), LOW, CLUSTER_WIDE, "Time a topic partition leader waits before expiring producer ids."),
    ("producer.id.expiration.check.interval.ms", INT, 600000, at_least(1), LOW, READ_ONLY, "The interval at which to remove producer ids that have expired."),
    ("zookeeper.connect", STRING, None, None, HIGH, READ_ONLY, "ZooKeeper connection string host:port[,host:port...][/chroot]. Unset: the embedded metadata store is used."),
    ("zookeeper.session.timeout.ms", INT, 18000, None, HIGH, READ_ONLY, "Zookeeper session timeout."),
    ("zookeeper.connection.timeout.ms", INT, None, None, HIGH, READ_ONLY, "Max time to wait to establish a ZooKeeper connection; if not set, zookeeper.session.timeout.ms is used."),
    ("zookeeper.max.in.flight.requests", INT, 10, at_least(1), HIGH, READ_ONLY, "Maximum unacknowledged requests sent to ZooKeeper before blocking."),
    ("broker.id.generation.enable", BOOLEAN, True, None, MEDIUM, READ_ONLY, "Enable automatic broker id generation; reserved.broker.max.id should be reviewed."),
    ("reserved.broker.max.id", INT, 1000, at_least(0), MEDIUM, READ_ONLY, "Max number that can be used for a broker.id; generated ids start above it."),
    ("controlled.shutdown.enable", BOOLEAN, True, None, MEDIUM, READ_ONLY, "Enable controlled shutdown of the server."),
    ("controlled.shutdown.max.retries", INT, 3, None, MEDIUM, READ_ONLY, "Number of retries of a controlled shutdown before an unclean shutdown."),
    ("controlled.shutdown.retry.backoff.ms", LONG, 5000, None, MEDIUM, READ_ONLY, "Backoff between controlled shutdown retries."),
    ("controller.socket.timeout.ms", INT, 30000, None, MEDIUM, READ_ONLY, "The socket timeout for controller-to-broker channels."),
    ("replica.lag.time.max.ms", LONG, 30000, None, HIGH, READ_ONLY, "A follower that has not caught up to the leader's log end for this long is removed from the ISR."),
    ("num.replica.fetchers", INT, 1, None, HIGH, CLUSTER_WIDE, "Number of fetcher threads used to replicate records from each source broker."),
    ("replica.fetch.max.bytes", INT, 1024 * 1024, at_least(0), MEDIUM, READ_ONLY, "The number of bytes of messages to attempt to fetch for each partition."),
    ("replica.fetch.min.bytes", INT, 1, None, HIGH, READ_ONLY, "Minimum bytes expected for each fetch response."),
    ("replica.fetch.wait.max.ms", INT, 500, None, MEDIUM, READ_ONLY, "The maximum wait time for each fetcher request issued by follower replicas."),
    ("replica.fetch.backoff.ms", INT, 1000, at_least(0), MEDIUM, READ_ONLY, "The amount of time to sleep when a fetch partition error occurs."),
    ("replica.fetch.response.max.bytes", INT, 10 * 1024 * 1024, at_least(0), MEDIUM, READ_ONLY, "Maximum bytes expected for the entire fetch response."),
    ("replica.socket.timeout.ms", INT, 30000, None, HIGH, READ_ONLY, "The socket timeout for network requests of replica fetchers."),
    ("replica.socket.receive.buffer.bytes", INT, 64 * 1024, None, HIGH, READ_ONLY, "The socket receive buffer for network requests to the leader."),
    ("replica.high.watermark.checkpoint.interval.ms", LONG, 5000, None, HIGH, READ_ONLY, "The frequency with which the high watermark is saved out to disk."),
    ("fetch.max.bytes", INT, 55 * 1024 * 1024, at_least(1024), MEDIUM, READ_ONLY, "The maximum number of bytes returned for a fetch request."),
    ("fetch.purgatory.purge.interval.requests", INT, 1000, None, MEDIUM, READ_ONLY, "The purge interval (in number of requests) of the fetch request purgatory."),
    ("producer.purgatory.purge.interval.requests", INT, 1000, None, MEDIUM, READ_ONLY, "The purge interval (in number of requests) of the producer request purgatory."),
    ("delete.records.purgatory.purge.interval.requests", INT, 1, None, MEDIUM, READ_ONLY, "The purge interval (in number of requests) of the delete records request purgatory."),
    ("queued.max.requests", INT, 500, at_least(1), HIGH, READ_ONLY, "The number of queued requests allowed before blocking the network threads."),
    ("connections.max.idle.ms", LONG, 600000, None, MEDIUM, READ_ONLY, "Idle connections timeout: idle connections are closed after this long."),
    ("max.connections", INT, INT_MAX, at_least(0), MEDIUM, CLUSTER_WIDE, "The maximum number of connections allowed in the broker at any time."),
    ("max.connections.per.ip", INT, INT_MAX, at_least(0), MEDIUM, CLUSTER_WIDE, "The maximum number of connections allowed from each ip address."),
    ("max.connections.per.ip.overrides", STRING, "", None, MEDIUM, CLUSTER_WIDE, "A comma-separated list of per-ip or hostname overrides to the default maximum number of connections, e.g. hostName:100,127.0.0.1:200."),
    ("queued.max.request.bytes", LONG, -1, None, MEDIUM, READ_ONLY, "The number of queued bytes allowed before no more requests are read (per worker in mpbroker); -1: unbounded."),
    ("max.incremental.fetch.session.cache.slots", INT, 1000, at_least(0), MEDIUM, READ_ONLY, "The maximum number of incremental fetch sessions that we will maintain (per worker in mpbroker)."),
    ("max.incremental.fetch.session.cache.bytes", LONG, 128 * 1024 * 1024, at_least(0), MEDIUM, READ_ONLY, "mpbroker: the most memory (estimated) the incremental fetch sessions of one worker may hold."),
    ("num.io.threads", INT, 8, at_least(1), HIGH, CLUSTER_WIDE, "The number of threads the server uses for processing requests."),
    ("num.network.threads", INT, 3, at_least(1), HIGH, CLUSTER_WIDE, "The number of threads the server uses for network requests."),
    ("num.recovery.threads.per.data.dir", INT, 1, at_least(1), HIGH, CLUSTER_WIDE, "The number of threads per data directory for log recovery at startup and flushing at shutdown."),
    ("background.threads", INT, 10, at_least(1), HIGH, CLUSTER_WIDE, "The number of threads to use for background processing tasks."),
    ("auto.leader.rebalance.enable", BOOLEAN, True, None, HIGH, READ_ONLY, "Enables automatic leader balancing."),
    ("leader.imbalance.check.interval.seconds", LONG, 300, at_least(1), HIGH, READ_ONLY, "The frequency with which the partition rebalance check is triggered by the controller."),
    ("leader.imbalance.per.broker.percentage", INT, 10, None, HIGH, READ_ONLY, "The ratio of leader imbalance allowed per broker, in percentage."),
    # TLS and SASL (issue #17; mpbroker/security/): each ssl.* / sasl.* key may be set per
    # listener as listener.name.<listener lower-case>.<key> (mpbroker/security/listener_config.py);
    # read at start: a change takes a restart (the TLS contexts are built then)
    ("ssl.keystore.type", STRING, "JKS", None, MEDIUM, READ_ONLY, "The file format of the key store: PEM or PKCS12 (JKS, Kafka's default, is not read by mpbroker: convert it to PKCS12)."),
    ("ssl.keystore.location", STRING, None, None, HIGH, READ_ONLY, "The location of the key store file (PEM: the private key and its certificate chain in one file)."),
    ("ssl.keystore.password", PASSWORD, None, None, HIGH, PER_BROKER, "The store password for the key store file."),
    ("ssl.keystore.key", PASSWORD, None, None, HIGH, READ_ONLY, "The private key in PEM format (with ssl.keystore.type=PEM), instead of a key store file."),
    ("ssl.keystore.certificate.chain", PASSWORD, None, None, HIGH, READ_ONLY, "The certificate chain in PEM format (with ssl.keystore.key)."),
    ("ssl.key.password", PASSWORD, None, None, HIGH, PER_BROKER, "The password of the private key in the key store file."),
    ("ssl.truststore.type", STRING, "JKS", None, MEDIUM, READ_ONLY, "The file format of the trust store: PEM or PKCS12."),
    ("ssl.truststore.location", STRING, None, None, HIGH, READ_ONLY, "The location of the trust store file (the CA certificates client certificates are verified against)."),
    ("ssl.truststore.password", PASSWORD, None, None, HIGH, PER_BROKER, "The password for the trust store file."),
    ("ssl.truststore.certificates", PASSWORD, None, None, HIGH, READ_ONLY, "Trusted certificates in PEM format (with ssl.truststore.type=PEM), instead of a trust store file."),
    ("ssl.client.auth", STRING, "none", ValidString(("required", "requested", "none")), MEDIUM, READ_ONLY, "Whether TLS listeners ask for client certificates: required, requested or none."),
    ("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", None, MEDIUM, READ_ONLY, "The TLS protocol versions enabled."),
    ("ssl.protocol", STRING, "TLSv1.3", None, MEDIUM, READ_ONLY, "The TLS protocol used to make the context (the versions are ssl.enabled.protocols')."),
    ("ssl.cipher.suites", LIST, "", None, LOW, READ_ONLY, "Cipher suites (OpenSSL names for TLSv1.2); empty: OpenSSL's defaults."),
    ("ssl.endpoint.identification.algorithm", STRING, "https", None, LOW, READ_ONLY, "The endpoint identification algorithm of the broker's own TLS connections (inter-broker): https checks the host name; empty does not."),
    ("ssl.principal.mapping.rules", STRING, "DEFAULT", None, LOW, READ_ONLY, "KIP-371 rules mapping a client certificate's distinguished name to a user name: RULE:pattern/replacement/[LU], ..., DEFAULT."),
    ("sasl.enabled.mechanisms", LIST, "GSSAPI", None, MEDIUM, READ_ONLY, "The SASL mechanisms enabled on SASL listeners (mpbroker serves PLAIN; others as registered in mpbroker/security/)."),
    ("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", None, MEDIUM, READ_ONLY, "The SASL mechanism of the broker's own connections on a SASL inter-broker listener."),
    ("sasl.jaas.config", PASSWORD, None, None, MEDIUM, READ_ONLY, "JAAS login context in the format of JAAS configuration files (e.g. a PlainLoginModule line with user_<name>=\"<password>\" options and the username/password the broker itself uses)."),
    ("sasl.server.max.receive.size", INT, 524288, None, LOW, READ_ONLY, "The maximum receive size allowed before and during initial SASL authentication; a larger token closes the connection."),
    ("connection.failed.authentication.delay.ms", INT, 100, at_least(0), LOW, READ_ONLY, "Connection close delay on failed authentication."),
    ("connections.max.reauth.ms", LONG, 0, None, MEDIUM, READ_ONLY, "When positive, the session lifetime of a SASL connection (KIP-368): a request other than re-authentication after it closes the connection. 0: no re-authentication."),
    # --- authorization (issue #17, mpbroker/security/authorizer.py)
    ("authorizer.class.name", STRING, "", None, LOW, READ_ONLY, "The authorizer: empty (the default) authorizes nothing, every request is allowed, as Kafka without an authorizer; kafka.security.authorizer.AclAuthorizer, org.apache.kafka.metadata.authorizer.StandardAuthorizer or mpbroker.security.authorizer.Authorizer enable ACLs (one implementation: Kafka's AclAuthorizer semantics). Any other class is refused at start."),
    ("super.users", STRING, "", None, LOW, READ_ONLY, "A list of principals, separated by semicolons (User:admin;User:broker), allowed every operation on every resource whatever the ACLs say."),
    ("allow.everyone.if.no.acl.found", BOOLEAN, False, None, LOW, READ_ONLY, "With an authorizer: whether a resource that no ACL names is open to every principal (true) or to super users only (false, Kafka's default)."),
    ("lone.broker.inter.broker.requests.enable", BOOLEAN, False, None, LOW, READ_ONLY, "mpbroker: on a broker without zookeeper.connect, serve the inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterPartition) and replica fetches from clients instead of refusing them with CLUSTER_AUTHORIZATION_FAILED. Only for tests that play a controller or a follower by hand: never on a broker that untrusted clients reach."),
    # --- end authorization
    # request limits (issue #15): KIP-599 controller mutation quota, KIP-578 partition caps
    ("controller.mutation.rate", DOUBLE, DOUBLE_MAX, at_least(0), MEDIUM, CLUSTER_WIDE, "The default controller_mutation_rate client quota (KIP-599) of every user/client-id: partitions created or deleted per second through CreateTopics, CreatePartitions and DeleteTopics, as a token bucket of burst rate * controller.quota.window.num * controller.quota.window.size.seconds. The default is no quota."),
    ("controller.quota.window.num", INT, 11, at_least(1), LOW, READ_ONLY, "The number of samples to retain in memory for controller mutation quotas."),
    ("controller.quota.window.size.seconds", INT, 1, at_least(1), LOW, READ_ONLY, "The time span of each sample for controller mutations quotas."),
    # client quotas (issue #17, KIP-13/55/124: mpbroker/security/quotas.py)
    ("quota.window.num", INT, 11, at_least(1), LOW, READ_ONLY, "The number of samples to retain in memory for client quotas."),
    ("quota.window.size.seconds", INT, 1, at_least(1), LOW, READ_ONLY, "The time span of each sample for client quotas."),
    ("max.broker.partitions", INT, 4000, at_least(1), MEDIUM, CLUSTER_WIDE, "The maximum number of partition replicas one broker may host (KIP-578); a CreateTopics or CreatePartitions that would pass it is refused with POLICY_VIOLATION."),
    ("max.partitions", INT, INT_MAX, at_least(1), MEDIUM, CLUSTER_WIDE, "The maximum number of partitions in the cluster (KIP-578); a CreateTopics or CreatePartitions that would pass it is refused with POLICY_VIOLATION."),
    # mpbroker's own
    ("num.workers", INT, None, at_least(1), HIGH, READ_ONLY, "mpbroker: number of worker processes (one per core). Default: the number of CPUs usable by this process."),
    ("worker.cpu.affinity", BOOLEAN, False, None, MEDIUM, READ_ONLY, "mpbroker: pin each worker process to one CPU (worker i to the i-th usable CPU). Off by default: a pinned worker cannot move off a CPU that clients or other services keep busy (on a 2-vCPU machine shared with its clients it cost 13% more CPU per request, loadtest/RESULTS.md); pin on a machine whose CPUs the broker has to itself."),
    ("worker.connection.handoff", BOOLEAN, True, None, MEDIUM, READ_ONLY, "mpbroker: hand a plaintext client connection (no TLS, no SASL) whose consumer Fetches (3 in a row) or Produce requests (24 in a row) go only to one other worker's partitions to that worker, with its fetch session, so that they run where their partitions are (workers/handoff.py); each move doubles the streak the next takes. The moved connection's client quota usage is counted by that worker. Off: every connection stays on the worker the kernel gave it to."),
    ("admin.socket", STRING, None, None, LOW, READ_ONLY, "mpbroker: path of the local admin socket (served by the controller process; `mpbroker placement`). Default: <first log dir>/.mpbroker-admin.sock."),
    ("worker.heartbeat.timeout.ms", INT, 30000, at_least(1), MEDIUM, READ_ONLY, "mpbroker: a serving child whose heartbeat is older than this is killed (SIGKILL) and respawned."),
    ("placement.balance.threshold", DOUBLE, 0.2, at_least(0), MEDIUM, READ_ONLY, "mpbroker: placement balancing moves partitions only when the most loaded worker's load (bytes, requests and CPU, each as a share of the broker's total) exceeds the mean by more than this fraction; then the fewest moves found that bring every worker within it."),
    ("placement.balance.interval.ms", LONG, 0, at_least(0), MEDIUM, READ_ONLY, "mpbroker: run placement balancing continuously every this many ms (on exponentially weighted load averages); 0: only `mpbroker placement balance`."),
    ("placement.balance.cooldown.ms", LONG, 300000, at_least(0), LOW, READ_ONLY, "mpbroker: a partition moved by placement balancing is not moved again by it within this time (damping)."),
    ("worker.listener.eviction.ms", INT, 3000, at_least(0), MEDIUM, READ_ONLY, "mpbroker: a serving worker whose heartbeat is older than this is taken out of the SO_REUSEPORT listener group (new connections go to the other workers) until it beats again; 0 (or not below worker.heartbeat.timeout.ms) disables it."),
    ("worker.shutdown.timeout.ms", INT, 30000, at_least(0), MEDIUM, READ_ONLY, "mpbroker: how long a controlled shutdown waits for the workers before SIGKILL."),
    ("worker.start.timeout.ms", INT, 300000, at_least(1), MEDIUM, READ_ONLY, "mpbroker: a worker (first start or respawn) that does not serve within this time of its fork is killed (SIGKILL) and counts as a boot failure."),
    ("worker.boot.max.failures", INT, 3, at_least(1), LOW, READ_ONLY, "mpbroker: boot failures of one worker in a row before the supervisor gives up."),
    ("worker.restart.max", INT, 10, at_least(0), LOW, READ_ONLY, "mpbroker: worker deaths within worker.restart.window.ms above which the supervisor stops (crash loop)."),
    ("worker.restart.window.ms", INT, 60000, at_least(1), LOW, READ_ONLY, "mpbroker: the window of worker.restart.max."),
    ("log.level", STRING, "INFO", ValidString(("CRITICAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG"), case_insensitive=True), MEDIUM, READ_ONLY, "mpbroker: the level of the broker's log (Python logging: CRITICAL, ERROR, WARN or WARNING, INFO, DEBUG; any case). A SIGHUP reload applies a new value at once."),
    ("metrics.listener", STRING, None, HttpListener(), MEDIUM, READ_ONLY, "mpbroker: where the Prometheus endpoint /metrics is served (served by the controller process), e.g. http://127.0.0.1:9644. Unset: no metrics."),
    ("log.requests", BOOLEAN, False, None, LOW, READ_ONLY, "mpbroker: log one line per request (API, version, client id, principal, partitions, sizes, latency) to the logger kafka.request.logger at DEBUG; that logger at DEBUG does the same."),
    # KIP-848 consumer groups (Kafka's GroupCoordinatorConfig)
    ("group.consumer.session.timeout.ms", INT, 45000, at_least(1), MEDIUM, READ_ONLY, "The timeout to detect client failures when using the consumer group protocol."),
    ("group.consumer.heartbeat.interval.ms", INT, 5000, at_least(1), MEDIUM, READ_ONLY, "The heartbeat interval given to the members of a consumer group."),
    ("group.consumer.assignors", LIST, ["uniform", "range"], None, MEDIUM, READ_ONLY, "The server-side assignors as a list of names (uniform, range) or Kafka class names; the first is the default."),
    ("group.consumer.max.size", INT, INT_MAX, at_least(1), MEDIUM, READ_ONLY, "The maximum number of consumers that a single consumer group supports."),
]

BROKER_CONFIGS: Dict[str, ConfigKey] = {
    r[0]: ConfigKey(r[0], r[1], r[2], r[3], r[4], r[6], r[5]) for r in _BROKER_TABLE}

# Topic configs: name, type, LogConfig default, validator, importance, doc,
# then the broker synonyms in Kafka's order (ServerTopicConfigSynonyms); the
# first is the one DescribeConfigs reports.
_TOPIC_TABLE = [
    ("cleanup.policy", LIST, ["delete"], ValidList(CLEANUP_POLICIES), MEDIUM, "Retention policy for old segments: delete, compact, or both.", ["log.cleanup.policy"]),
    ("compression.type", STRING, "producer", ValidString(COMPRESSION_TYPES), MEDIUM, "Final compression type of the topic; 'producer' keeps the producer's codec.", ["compression.type"]),
    ("compression.gzip.level", INT, -1, GzipLevel(), MEDIUM, "The compression level to use if compression.type is gzip.", ["compression.gzip.level"]),
    ("compression.lz4.level", INT, 9, between(1, 17), MEDIUM, "The compression level to use if compression.type is lz4.", ["compression.lz4.level"]),
    ("compression.zstd.level", INT, 3, between(-131072, 22), MEDIUM, "The compression level to use if compression.type is zstd.", ["compression.zstd.level"]),
    ("delete.retention.ms", LONG, 86400000, at_least(0), MEDIUM, "How long tombstones are retained for compacted topics.", ["log.cleaner.delete.retention.ms"]),
    ("file.delete.delay.ms", LONG, 60000, at_least(0), MEDIUM, "Time to wait before deleting a file from the filesystem.", ["log.segment.delete.delay.ms"]),
    ("flush.messages", LONG, LONG_MAX, at_least(1), MEDIUM, "Force an fsync after this many messages.", ["log.flush.interval.messages"]),
    ("flush.ms", LONG, LONG_MAX, at_least(0), MEDIUM, "Force an fsync after this much time.", ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]),
    ("index.interval.bytes", INT, 4096, at_least(0), MEDIUM, "How frequently an index entry is added to the offset index.", ["log.index.interval.bytes"]),
    ("max.compaction.lag.ms", LONG, LONG_MAX, at_least(1), MEDIUM, "The maximum time a message remains ineligible for compaction.", ["log.cleaner.max.compaction.lag.ms"]),
    ("max.message.bytes", INT, 1024 * 1024 + 12, at_least(0), MEDIUM, "The largest record batch size allowed by the topic.", ["message.max.bytes"]),
    ("message.downconversion.enable", BOOLEAN, True, None, LOW, "Whether down-conversion of message formats is enabled.", ["log.message.downconversion.enable"]),
    ("message.timestamp.type", STRING, "CreateTime", ValidString(TIMESTAMP_TYPES), MEDIUM, "CreateTime or LogAppendTime.", ["log.message.timestamp.type"]),
    ("message.timestamp.difference.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM, "[Deprecated] Maximum difference between broker time and message timestamp.", ["log.message.timestamp.difference.max.ms"]),
    ("message.timestamp.before.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM, "Maximum allowed time a timestamp may be earlier than the broker's time.", ["log.message.timestamp.before.max.ms"]),
    ("message.timestamp.after.max.ms", LONG, LONG_MAX, at_least(0), MEDIUM, "Maximum allowed time a timestamp may be later than the broker's time.", ["log.message.timestamp.after.max.ms"]),
    ("min.cleanable.dirty.ratio", DOUBLE, 0.5, between(0, 1), MEDIUM, "How frequently the log compactor will attempt to clean the log.", ["log.cleaner.min.cleanable.ratio"]),
    ("min.compaction.lag.ms", LONG, 0, at_least(0), MEDIUM, "The minimum time a message remains uncompacted.", ["log.cleaner.min.compaction.lag.ms"]),
    ("min.insync.replicas", INT, 1, at_least(1), MEDIUM, "Minimum in-sync replicas for acks=all writes.", ["min.insync.replicas"]),
    ("preallocate", BOOLEAN, False, None, MEDIUM, "Preallocate the file on disk when creating a new log segment.", ["log.preallocate"]),
    ("retention.bytes", LONG, -1, None, MEDIUM, "Maximum size a partition can grow to before old segments are discarded; -1 no limit.", ["log.retention.bytes"]),
    ("retention.ms", LONG, 7 * 24 * 3600 * 1000, at_least(-1), MEDIUM, "Maximum time a log is retained before old segments are discarded; -1 no limit.", ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]),
    ("segment.bytes", INT, 1024**3, at_least(14), MEDIUM, "The segment file size for the log.", ["log.segment.bytes"]),
    ("segment.index.bytes", INT, 10 * 1024 * 1024, at_least(4), MEDIUM, "The size of the index that maps offsets to file positions.", ["log.index.size.max.bytes"]),
    ("segment.jitter.ms", LONG, 0, at_least(0), MEDIUM, "Maximum random jitter subtracted from segment.ms.", ["log.roll.jitter.ms", "log.roll.jitter.hours"]),
    ("segment.ms", LONG, 7 * 24 * 3600 * 1000, at_least(1), MEDIUM, "Period after which a segment is rolled even if not full.", ["log.roll.ms", "log.roll.hours"]),
    ("unclean.leader.election.enable", BOOLEAN, False, None, MEDIUM, "Whether replicas not in the ISR may be elected leader as a last resort.", ["unclean.leader.election.enable"]),
]

TOPIC_CONFIGS: Dict[str, ConfigKey] = {
    r[0]: ConfigKey(r[0], r[1], r[2], r[3], r[4], r[5], CLUSTER_WIDE) for r in _TOPIC_TABLE}
TOPIC_BROKER_SYNONYMS: Dict[str, List[str]] = {r[0]: list(r[6]) for r in _TOPIC_TABLE}

# Broker-side synonyms of a broker config (DynamicBrokerConfig.brokerConfigSynonyms).
_BROKER_SYNONYM_GROUPS = [
    ["log.roll.ms", "log.roll.hours"],
    ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
]


def broker_config_synonyms(name: str) -> List[str]:
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return list(group)
    return [name]
