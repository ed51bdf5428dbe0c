"""LeaderAndIsr (key 4, v0-7), StopReplica (key 5, v0-4), UpdateMetadata (key 6, v0-8):
the controller -> broker requests. Cluster-scoped: the worker hands each to its broker's
controller process (`controller_request`, mpbroker/controller/zk/), which refuses an
older controller epoch (STALE_CONTROLLER_EPOCH) or an older broker epoch
(STALE_BROKER_EPOCH), re-reads the named partitions from ZooKeeper, pushes the new view
to the workers and answers per partition. The embedded (single-broker) controller
refuses every one with STALE_CONTROLLER_EPOCH: no other controller governs it."""


async def handle(broker, ctx, req):
    return await broker.controller.controller_request(ctx.api_key, ctx.api_version, req)
