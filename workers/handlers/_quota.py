"""Shared plumbing of the KIP-599 controller mutation quota for CreateTopics (19),
DeleteTopics (20) and CreatePartitions (37): what the controller is told about the
request, and how its throttle time reaches the client.

The controller counts the partitions a request creates or deletes against the client
id's token bucket (mpbroker/metadata/quota.py, `controller.mutation.rate`): strictly
from the versions that know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6, DeleteTopics
v5, CreatePartitions v3), permissively before. The throttle time goes in the
response's `throttle_time_ms`; versions from KIP-219 on (CreateTopics v3, DeleteTopics
v2, CreatePartitions v1) back off by themselves, older ones are answered that much
later, as Kafka delays them."""
import asyncio

from mpbroker.metadata.quota import STRICT_SINCE
from mpbroker.protocol import api_keys
from mpbroker.security.quotas import user_name

# api key -> first version whose client honours throttle_time_ms itself (KIP-219)
CLIENT_THROTTLES_SINCE = {api_keys.CREATE_TOPICS: 3, api_keys.DELETE_TOPICS: 2,
                          api_keys.CREATE_PARTITIONS: 1}
MAX_DELAY_MS = 30000      # an old client is never held longer than this


def quota_arg(ctx) -> tuple:
    """The controller methods' `quota` argument: (client_id, strict), plus the user
    (the principal's name, for a per-entity controller_mutation_rate, issue #17) when
    it is not ANONYMOUS, the controller's default."""
    args = (ctx.client_id or "", ctx.api_version >= STRICT_SINCE[ctx.api_key])
    user = user_name(getattr(ctx, "principal", "User:ANONYMOUS"))
    return args if user == "ANONYMOUS" else args + (user,)


async def throttle(ctx, results) -> int:
    """The response's throttle_time_ms; waits it out first for an old version."""
    ms = int(getattr(results, "throttle_time_ms", 0) or 0)
    if ms > 0 and ctx.api_version < CLIENT_THROTTLES_SINCE[ctx.api_key]:
        await asyncio.sleep(min(ms, MAX_DELAY_MS) / 1000)
    return ms
