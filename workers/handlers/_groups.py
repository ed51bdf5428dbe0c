"""Shared plumbing of the group API handlers: find the coordinator of a group and turn
its `respond` callback into something the dispatcher can wait for."""
from __future__ import annotations

import asyncio

from mpbroker.protocol.errors import ErrorCode


def call(method, *args):
    """Run a coordinator method that answers through a callback; return the response
    dict if it answered at once, else a future of it."""
    box = []
    fut = None

    def respond(resp):
        if fut is None:
            box.append(resp)
        elif not fut.done():
            fut.set_result(resp)

    method(*args, respond)
    if box:
        return box[0]
    fut = asyncio.get_running_loop().create_future()
    return fut


def coordinator(broker, group_id: str):
    """(coordinator, error code): NOT_COORDINATOR when another worker/broker has it,
    COORDINATOR_NOT_AVAILABLE when the offsets topic does not exist yet."""
    groups = broker.groups
    if groups is None or "__consumer_offsets" not in broker.metadata.topics:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    coord = groups.coordinator_for(group_id)
    if coord is None:
        return None, ErrorCode.NOT_COORDINATOR
    return coord, ErrorCode.NONE
