"""DescribeUserScramCredentials (key 50, v0) and AlterUserScramCredentials (key 51, v0),
KIP-554: the SCRAM users, answered by the controller (the embedded store or ZooKeeper's
`/config/users/<user>`) over the controller RPC; the checks and messages are
mpbroker/metadata/scram_users.py's. A change reaches every worker with the metadata, so
a new user logs in, and a removed one no longer does, with no restart.

Authorization (issue 17, the ACL helper's part): DESCRIBE on CLUSTER for key 50 (refused:
the top-level error CLUSTER_AUTHORIZATION_FAILED), ALTER on CLUSTER for key 51 (refused:
every user's result CLUSTER_AUTHORIZATION_FAILED), as Kafka's KafkaApis.
"""
from __future__ import annotations


async def _describe(broker, ctx, req):
    # authorization spot (ACLs): DESCRIBE on CLUSTER
    names = [u["name"] for u in req["users"]] if req["users"] is not None else None
    results = await broker.controller.describe_user_scram_credentials(names)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


async def _alter(broker, ctx, req):
    # authorization spot (ACLs): ALTER on CLUSTER
    deletions = [(d["name"], d["mechanism"]) for d in req["deletions"]]
    upsertions = [(u["name"], u["mechanism"], u["iterations"], bytes(u["salt"]),
                   bytes(u["salted_password"])) for u in req["upsertions"]]
    results = await broker.controller.alter_user_scram_credentials(deletions, upsertions)
    return {"throttle_time_ms": 0, "results": [
        {"user": user, "error_code": code, "error_message": message}
        for user, code, message in results]}


def handle_describe(broker, ctx, req):
    return _describe(broker, ctx, req)


def handle_alter(broker, ctx, req):
    return _alter(broker, ctx, req)
