"""Which ACL each API needs: Kafka's KafkaApis checks as one table, read by the front
check (workers/authz.py) before a request is routed.

`API_ACLS[api_key]` is a tuple of `Check`s, all of which apply:

* `Check(op, CLUSTER)`: the whole request needs `op` on the cluster; denied, it gets the
  API's error response with CLUSTER_AUTHORIZATION_FAILED.
* `Check(op, type, field=f)`: the whole request needs `op` on the resource named by the
  top-level field `f` (a group id, a transactional id; a null value needs nothing);
  denied: the error response with that type's *_AUTHORIZATION_FAILED.
* `Check(op, type, path=p, field=f)`: per item of the request array `p`, on the resource
  named by the item's field `f` (`f=""`: the items are bare names; a tuple: the first
  field present; `topic_id` is resolved through the metadata). Denied items are taken
  out of the request and answered with the type's error, the rest goes on (Kafka's
  per-topic TOPIC_AUTHORIZATION_FAILED). An array absent in a version is skipped.
* `Check(special=name)`: a rule that does not fit a row (Metadata's listing and
  auto-creation, CreateTopics' CREATE on cluster or topic, configs by resource type,
  FindCoordinator by key type, InitProducerId, replica Fetch, AddPartitionsToTxn v4+
  (sent by brokers: CLUSTER_ACTION), OffsetFetch's topics (per group from v8, all
  topics when null), ListGroups / ListTransactions filtering);
  workers/authz.py implements them by name.

An API not in the table needs nothing (ApiVersions, SASL). INTER_BROKER lists the APIs
only brokers and controllers send: CLUSTER_ACTION with an authorizer, and refused
outright from anyone on a broker that has no other brokers (no zookeeper.connect).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple, Union

from mpbroker.protocol import api_keys as k

from .acl import (ALTER, ALTER_CONFIGS, CLUSTER, CLUSTER_ACTION, CREATE, DELETE, DESCRIBE, DESCRIBE_CONFIGS, GROUP, READ,
                  TOPIC, TRANSACTIONAL_ID, WRITE)


class Check(NamedTuple):
    op: int = 0
    type: int = CLUSTER
    path: Optional[str] = None
    field: Union[str, Tuple[str, ...], None] = None
    special: Optional[str] = None


def cluster(op):
    return Check(op, CLUSTER)


def each(op, type_, path, field=("name",)):
    return Check(op, type_, path, field if isinstance(field, tuple) else (field,))


def one(op, type_, field):
    return Check(op, type_, None, field)


def special(name):
    return Check(special=name)


TOPIC_NAME = ("name", "topic", "topic_id")

API_ACLS = {
    k.PRODUCE:                 (one(WRITE, TRANSACTIONAL_ID, "transactional_id"),
                                each(WRITE, TOPIC, "topic_data", TOPIC_NAME)),
    k.FETCH:                   (special("fetch"), ),
    k.LIST_OFFSETS:            (each(DESCRIBE, TOPIC, "topics", TOPIC_NAME), ),
    k.METADATA:                (special("metadata"), ),
    k.LEADER_AND_ISR:          (cluster(CLUSTER_ACTION), ),
    k.STOP_REPLICA:            (cluster(CLUSTER_ACTION), ),
    k.UPDATE_METADATA:         (cluster(CLUSTER_ACTION), ),
    k.CONTROLLED_SHUTDOWN:     (cluster(CLUSTER_ACTION), ),
    k.WRITE_TXN_MARKERS:       (cluster(CLUSTER_ACTION), ),
    k.ALTER_PARTITION:         (cluster(CLUSTER_ACTION), ),
    k.OFFSET_COMMIT:           (one(READ, GROUP, "group_id"), each(READ, TOPIC, "topics")),
    k.OFFSET_FETCH:            (one(DESCRIBE, GROUP, "group_id"),          # v0-7
                                each(DESCRIBE, GROUP, "groups", "group_id"),   # v8+
                                special("offset_fetch")),                      # topics: DESCRIBE
    k.FIND_COORDINATOR:        (special("find_coordinator"), ),
    k.JOIN_GROUP:              (one(READ, GROUP, "group_id"), ),
    k.HEARTBEAT:               (one(READ, GROUP, "group_id"), ),
    k.LEAVE_GROUP:             (one(READ, GROUP, "group_id"), ),
    k.SYNC_GROUP:              (one(READ, GROUP, "group_id"), ),
    k.DESCRIBE_GROUPS:         (each(DESCRIBE, GROUP, "groups", ""), ),
    k.LIST_GROUPS:             (special("list_groups"), ),
    k.CREATE_TOPICS:           (special("create_topics"), ),
    k.DELETE_TOPICS:           (each(DELETE, TOPIC, "topic_names", ""), each(DELETE, TOPIC, "topics", TOPIC_NAME)),
    k.DELETE_RECORDS:          (each(DELETE, TOPIC, "topics"), ),
    k.INIT_PRODUCER_ID:        (special("init_producer_id"), ),
    k.OFFSET_FOR_LEADER_EPOCH: (special("replica_or_client"), each(DESCRIBE, TOPIC, "topics", TOPIC_NAME)),
    k.ADD_PARTITIONS_TO_TXN:   (one(WRITE, TRANSACTIONAL_ID, "v3_and_below_transactional_id"),
                                each(WRITE, TOPIC, "v3_and_below_topics"),
                                special("txn_verification")),           # v4+: brokers only
    k.ADD_OFFSETS_TO_TXN:      (one(WRITE, TRANSACTIONAL_ID, "transactional_id"),
                                one(READ, GROUP, "group_id")),
    k.END_TXN:                 (one(WRITE, TRANSACTIONAL_ID, "transactional_id"), ),
    k.TXN_OFFSET_COMMIT:       (one(WRITE, TRANSACTIONAL_ID, "transactional_id"),
                                one(READ, GROUP, "group_id"), each(READ, TOPIC, "topics")),
    k.DESCRIBE_ACLS:           (cluster(DESCRIBE), ),
    k.CREATE_ACLS:             (cluster(ALTER), ),
    k.DELETE_ACLS:             (cluster(ALTER), ),
    k.DESCRIBE_CONFIGS:        (special("describe_configs"), ),
    k.ALTER_CONFIGS:           (special("alter_configs"), ),
    k.INCREMENTAL_ALTER_CONFIGS: (special("alter_configs"), ),
    k.ALTER_REPLICA_LOG_DIRS:  (cluster(ALTER), ),
    k.DESCRIBE_LOG_DIRS:       (cluster(DESCRIBE), ),
    k.CREATE_PARTITIONS:       (each(ALTER, TOPIC, "topics"), ),
    k.DELETE_GROUPS:           (each(DELETE, GROUP, "groups_names", ""), ),
    k.ELECT_LEADERS:           (cluster(ALTER), ),
    k.ALTER_PARTITION_REASSIGNMENTS: (cluster(ALTER), ),
    k.LIST_PARTITION_REASSIGNMENTS:  (cluster(DESCRIBE), ),
    k.OFFSET_DELETE:           (one(DELETE, GROUP, "group_id"), each(READ, TOPIC, "topics")),
    k.DESCRIBE_CLIENT_QUOTAS:  (cluster(DESCRIBE_CONFIGS), ),
    k.ALTER_CLIENT_QUOTAS:     (cluster(ALTER_CONFIGS), ),
    k.DESCRIBE_USER_SCRAM_CREDENTIALS: (cluster(DESCRIBE), ),
    k.ALTER_USER_SCRAM_CREDENTIALS:    (cluster(ALTER), ),
    # DescribeCluster: no check, as Kafka (DESCRIBE on the cluster only decides
    # cluster_authorized_operations, which mpbroker does not compute)
    k.DESCRIBE_PRODUCERS:      (each(READ, TOPIC, "topics"), ),
    k.DESCRIBE_TRANSACTIONS:   (each(DESCRIBE, TRANSACTIONAL_ID, "transactional_ids", ""), ),
    k.LIST_TRANSACTIONS:       (special("list_transactions"), ),
    k.CONSUMER_GROUP_HEARTBEAT: (one(READ, GROUP, "group_id"), ),
    k.CONSUMER_GROUP_DESCRIBE: (each(DESCRIBE, GROUP, "group_ids", ""), ),
}

# Sent only by brokers and controllers (replica Fetch and OffsetForLeaderEpoch are
# recognised by their replica id in workers/authz.py).
INTER_BROKER = frozenset({k.LEADER_AND_ISR, k.STOP_REPLICA, k.UPDATE_METADATA,
                          k.CONTROLLED_SHUTDOWN, k.WRITE_TXN_MARKERS, k.ALTER_PARTITION})
