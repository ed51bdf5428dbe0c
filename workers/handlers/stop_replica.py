"""StopReplica (key 5), v0-4: a controller -> broker request. Cluster-scoped: the worker
hands it to its broker's controller process (`controller_request`,
mpbroker/controller/zk.py), which refuses an older controller epoch
(STALE_CONTROLLER_EPOCH) or an older broker epoch (STALE_BROKER_EPOCH), re-reads the named
partitions from ZooKeeper, pushes the new view to the workers and answers per partition.
The embedded (single-broker) controller refuses every one with STALE_CONTROLLER_EPOCH:
no other controller governs it."""


async def handle(broker, ctx, req):
    return await broker.controller.controller_request(ctx.api_key, ctx.api_version, req)
