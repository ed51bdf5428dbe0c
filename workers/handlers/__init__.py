"""The registry: every API this broker serves, its handler, version range and scope.

One line per API (Redpanda's handlers.h habit). The scope says where the request runs
when the broker has several workers (workers/scope.py: local, partition, group, txn,
cluster); the router (workers/router.py) reads it. The ranges are what ApiVersions
advertises; they stay inside Kafka's schema ranges (tests/protocol checks our
definitions against Kafka's; Metadata 13, ListOffsets 11 and DescribeCluster 2 are
Kafka 4.x versions that clients send, beyond the reference snapshot). Minimums follow
CLIENT-API-USAGE.md: Produce and FindCoordinator advertise 0 because librdkafka <
2.11.1 gates compression and the group consumer on those exact versions. Produce v0-v2
and Fetch v0-v3 speak magic 0/1 message sets (converted to and from the stored v2
batches by storage/convert.py).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from mpbroker.protocol import api_keys

from workers.handlers import (alter_configs, api_versions, delete_groups, describe_configs,
                              describe_groups, find_coordinator, heartbeat, join_group,
                              leave_group, list_groups, offset_commit, offset_delete,
                              offset_fetch, sync_group, create_partitions, create_topics, delete_records,
                              delete_topics, describe_cluster, fetch, init_producer_id,
                              list_offsets, metadata, offset_for_leader_epoch, produce)
from workers.handlers import consumer_group_describe, consumer_group_heartbeat
from workers.handlers import describe_producers, write_txn_markers
from workers.handlers import (alter_partition_reassignments, controlled_shutdown, elect_leaders,
                              list_partition_reassignments, controller_requests)
from workers.handlers import (add_offsets_to_txn, add_partitions_to_txn, describe_transactions,
                              end_txn, list_transactions, txn_offset_commit)
from workers.handlers import alter_replica_log_dirs, describe_log_dirs
from workers.handlers import sasl_authenticate, sasl_handshake
from workers.handlers import user_scram_credentials
from workers.handlers import create_acls, delete_acls, describe_acls
from workers.handlers import alter_client_quotas, describe_client_quotas
from workers.router import merge_list_groups, merge_list_transactions
from workers.scope import (GROUP, LOCAL, PARTITION, TXN, Scope, cluster, cluster_by_request,
                           partition)


class Handler(NamedTuple):
    handle: Callable
    min_version: int
    max_version: int
    scope: Scope = LOCAL


def advertised_versions() -> list[dict]:
    """Every range as served (Produce and Fetch from v0, see the module doc)."""
    out = []
    for key in sorted(HANDLERS):
        h = HANDLERS[key]
        lo = 0 if key == api_keys.PRODUCE else h.min_version
        out.append({"api_key": key, "min_version": lo, "max_version": h.max_version})
    return out


HANDLERS: dict[int, Handler] = {
    api_keys.PRODUCE:                 Handler(produce.handle, 0, 11, PARTITION),
    api_keys.FETCH:                   Handler(fetch.handle, 0, 17, partition(fetch.fan_out)),
    api_keys.LIST_OFFSETS:            Handler(list_offsets.handle, 0, 11, PARTITION),
    api_keys.METADATA:                Handler(metadata.handle, 0, 13),
    api_keys.API_VERSIONS:            Handler(api_versions.handler(advertised_versions), 0, 4),
    api_keys.SASL_HANDSHAKE:          Handler(sasl_handshake.handle, 0, 1),
    api_keys.SASL_AUTHENTICATE:       Handler(sasl_authenticate.handle, 0, 2),
    api_keys.CREATE_TOPICS:           Handler(create_topics.handle, 0, 7),
    api_keys.DELETE_TOPICS:           Handler(delete_topics.handle, 0, 6),
    api_keys.DELETE_RECORDS:          Handler(delete_records.handle, 0, 2, PARTITION),
    api_keys.INIT_PRODUCER_ID:        Handler(init_producer_id.handle, 0, 5, TXN),
    api_keys.OFFSET_FOR_LEADER_EPOCH: Handler(offset_for_leader_epoch.handle, 0, 4, PARTITION),
    api_keys.CREATE_PARTITIONS:       Handler(create_partitions.handle, 0, 3),
    api_keys.DESCRIBE_CLUSTER:        Handler(describe_cluster.handle, 0, 2),
    api_keys.DESCRIBE_CONFIGS:        Handler(describe_configs.handle, 0, 4),
    api_keys.ALTER_CONFIGS:           Handler(alter_configs.handle, 0, 2),
    api_keys.INCREMENTAL_ALTER_CONFIGS: Handler(alter_configs.handle_incremental, 0, 1),
    api_keys.FIND_COORDINATOR:        Handler(find_coordinator.handle, 0, 6),
    api_keys.JOIN_GROUP:              Handler(join_group.handle, 0, 9, GROUP),
    api_keys.SYNC_GROUP:              Handler(sync_group.handle, 0, 5, GROUP),
    api_keys.HEARTBEAT:               Handler(heartbeat.handle, 0, 4, GROUP),
    api_keys.LEAVE_GROUP:             Handler(leave_group.handle, 0, 5, GROUP),
    api_keys.OFFSET_COMMIT:           Handler(offset_commit.handle, 0, 9, GROUP),
    api_keys.OFFSET_FETCH:            Handler(offset_fetch.handle, 0, 9, GROUP),
    api_keys.LIST_GROUPS:             Handler(list_groups.handle, 0, 5,
                                              cluster(merge_list_groups)),
    api_keys.DESCRIBE_GROUPS:         Handler(describe_groups.handle, 0, 5, GROUP),
    api_keys.DELETE_GROUPS:           Handler(delete_groups.handle, 0, 2, GROUP),
    api_keys.OFFSET_DELETE:           Handler(offset_delete.handle, 0, 0, GROUP),
    api_keys.CONSUMER_GROUP_HEARTBEAT: Handler(consumer_group_heartbeat.handle, 0, 1, GROUP),
    api_keys.CONSUMER_GROUP_DESCRIBE: Handler(consumer_group_describe.handle, 0, 0, GROUP),
    api_keys.WRITE_TXN_MARKERS:       Handler(write_txn_markers.handle, 0, 1, PARTITION),
    api_keys.DESCRIBE_PRODUCERS:      Handler(describe_producers.handle, 0, 0, PARTITION),
    api_keys.ADD_PARTITIONS_TO_TXN:   Handler(add_partitions_to_txn.handle, 0, 4, TXN),
    api_keys.ADD_OFFSETS_TO_TXN:      Handler(add_offsets_to_txn.handle, 0, 4, TXN),
    api_keys.END_TXN:                 Handler(end_txn.handle, 0, 4, TXN),
    api_keys.TXN_OFFSET_COMMIT:       Handler(txn_offset_commit.handle, 0, 4, GROUP),
    api_keys.DESCRIBE_TRANSACTIONS:   Handler(describe_transactions.handle, 0, 0, TXN),
    api_keys.LIST_TRANSACTIONS:       Handler(list_transactions.handle, 0, 1,
                                              cluster(merge_list_transactions)),
    api_keys.LEADER_AND_ISR:          Handler(controller_requests.handle, 0, 7),
    api_keys.STOP_REPLICA:            Handler(controller_requests.handle, 0, 4),
    api_keys.UPDATE_METADATA:         Handler(controller_requests.handle, 0, 8),
    api_keys.CONTROLLED_SHUTDOWN:     Handler(controlled_shutdown.handle, 0, 3),
    api_keys.ELECT_LEADERS:           Handler(elect_leaders.handle, 0, 2),
    api_keys.ALTER_PARTITION_REASSIGNMENTS: Handler(alter_partition_reassignments.handle, 0, 0),
    api_keys.LIST_PARTITION_REASSIGNMENTS: Handler(list_partition_reassignments.handle, 0, 0),
    api_keys.DESCRIBE_LOG_DIRS:       Handler(describe_log_dirs.handle, 0, 4,
                                              cluster(describe_log_dirs.merge)),
    api_keys.ALTER_REPLICA_LOG_DIRS:  Handler(alter_replica_log_dirs.handle, 0, 2,
                                              cluster_by_request(alter_replica_log_dirs.merge)),
    # SCRAM users (issue 17): answered by the controller, over the controller RPC
    api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS: Handler(user_scram_credentials.handle_describe, 0, 0),
    api_keys.ALTER_USER_SCRAM_CREDENTIALS: Handler(user_scram_credentials.handle_alter, 0, 0),
    # ACLs (issue #17): stored by the controller, described from the worker's metadata
    api_keys.DESCRIBE_ACLS:           Handler(describe_acls.handle, 0, 3),
    api_keys.CREATE_ACLS:             Handler(create_acls.handle, 0, 3),
    api_keys.DELETE_ACLS:             Handler(delete_acls.handle, 0, 3),
    api_keys.DESCRIBE_CLIENT_QUOTAS:  Handler(describe_client_quotas.handle, 0, 1),
    api_keys.ALTER_CLIENT_QUOTAS:     Handler(alter_client_quotas.handle, 0, 1),
}
