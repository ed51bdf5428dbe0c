"""The checks of an AlterPartition (a leader changes its partition's ISR), shared by
both controllers; pure, no I/O (model: elections.py). See docs/INTERFACES.md
"Cluster mode" for the contract."""
from __future__ import annotations

from typing import AbstractSet, Sequence

from mpbroker.protocol.errors import ErrorCode


def check(leader: int, leader_epoch: int, partition_epoch: int, replicas: Sequence[int],
          isr: Sequence[int], req_leader: int, req_leader_epoch: int,
          req_partition_epoch: int, new_isr: Sequence[int],
          eligible: AbstractSet[int] | None = None) -> ErrorCode:
    """NONE when the request (req_*) may set the ISR of the partition whose current
    state is (leader, leader_epoch, partition_epoch, replicas, isr) to `new_isr`, else
    Kafka's error. `eligible`: the brokers an ISR may grow by (registered and not
    shutting down, KIP-841); None when every replica is."""
    if req_leader != leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if req_leader_epoch != leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if req_partition_epoch != partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    if req_leader not in new_isr or not set(new_isr) <= set(replicas) \
            or len(set(new_isr)) != len(new_isr):
        return ErrorCode.INVALID_REQUEST
    if eligible is not None and any(r not in eligible for r in set(new_isr) - set(isr)):
        return ErrorCode.INELIGIBLE_REPLICA
    return ErrorCode.NONE
