"""What one topic mutation may ask, shared by both controllers (issue #15).

CreateTopics / CreatePartitions / DeleteTopics take an optional `quota = (client_id,
strict)` and are counted in the KIP-599 controller mutation quota
(`mpbroker.metadata.quota`, `controller.mutation.rate`); their results are a
`MutationResults` list carrying `throttle_time_ms`. No change may pass
`max.broker.partitions` / `max.partitions` (POLICY_VIOLATION); `max.broker.partitions`
is lowered to what the workers' RLIMIT_NOFILE can hold (`fd_ceiling`; in cluster mode
this broker's limit stands in for every broker's).
"""
from __future__ import annotations

import logging
import resource

from mpbroker.metadata import model
from mpbroker.metadata.quota import MutationQuotas, MutationResults
from mpbroker.security.quotas import CONTROLLER_MUTATION_RATE, resolve as resolve_quota

log = logging.getLogger(__name__)

FDS_PER_PARTITION = 6    # descriptors a worker holds for one new partition (measured)
FD_RESERVE = 1024        # descriptors a worker keeps for connections, channels, rolls


def fd_ceiling(workers: int, soft_limit: int | None = None) -> tuple[int | None, str]:
    """(the most partitions this broker's workers can keep open, a note naming why) or
    (None, "") when the file descriptor limit does not bind. A worker keeps about
    `FDS_PER_PARTITION` descriptors per partition (segment, offset and time index, their
    checkpoint files) and needs `FD_RESERVE` for connections and channels; past its
    RLIMIT_NOFILE it can open nothing, connections included (issue #15)."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit < 0:
        return None, ""
    ceiling = max(1, workers * max(0, soft_limit - FD_RESERVE) // FDS_PER_PARTITION)
    return ceiling, (f"max.broker.partitions, lowered to what RLIMIT_NOFILE={soft_limit} allows "
                     f"{workers} worker(s) at {FDS_PER_PARTITION} descriptors a partition")


class MutationLimits:
    """The quota buckets and the partition caps of one controller."""

    def __init__(self, cfg):
        self.window = (cfg["controller.quota.window.num"],
                       cfg["controller.quota.window.size.seconds"])
        self.quotas = MutationQuotas(window_num=self.window[0], window_size_s=self.window[1])
        self.entity_quotas: dict = {}   # rate -> MutationQuotas (client quotas, issue #17)
        self.fd_ceiling, self.fd_note = fd_ceiling(cfg.num_workers)
        if self.fd_ceiling is not None and self.fd_ceiling < cfg["max.broker.partitions"]:
            log.warning("max.broker.partitions=%d is more than the file descriptor limit allows; "
                        "using %d (%s)", cfg["max.broker.partitions"], self.fd_ceiling,
                        self.fd_note)

    def quota(self, broker_cfg, quota, client_quotas=None):
        """The request's MutationQuota: `quota` is (client_id, strict[, user]) or None
        (not counted); the rate is read now from `broker_cfg`, so an AlterConfigs applies
        at once. A controller_mutation_rate client quota of the user / client id
        (`client_quotas`, issue #17, Kafka's resolution order) overrides the broker's
        default, with a bucket per metric key of its level."""
        self.quotas.configure(broker_cfg["controller.mutation.rate"])
        if quota is None:
            return self.quotas.quota(None, False)
        client_id, strict = quota[0], bool(quota[1])
        user = quota[2] if len(quota) > 2 else "ANONYMOUS"
        rate, metric = resolve_quota(client_quotas or {}, user, client_id or "",
                                     CONTROLLER_MUTATION_RATE)
        if rate is None:
            return self.quotas.quota(client_id, strict)
        per_rate = self.entity_quotas.get(rate)
        if per_rate is None:            # one bucket table per configured rate
            per_rate = self.entity_quotas[rate] = MutationQuotas(
                rate, window_num=self.window[0], window_size_s=self.window[1])
        return per_rate.quota("\0".join(metric), strict)

    def partitions(self, broker_cfg) -> model.PartitionLimits:
        configured = broker_cfg["max.broker.partitions"]
        if self.fd_ceiling is not None and self.fd_ceiling < configured:
            return model.PartitionLimits(self.fd_ceiling, broker_cfg["max.partitions"], self.fd_note)
        return model.PartitionLimits(configured, broker_cfg["max.partitions"])


def results(entries: list, q) -> MutationResults:
    """A mutation's result entries with the quota's throttle time."""
    out = MutationResults(entries)
    out.throttle_time_ms = q.throttle_time_ms()
    return out
