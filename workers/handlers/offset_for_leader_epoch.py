"""OffsetForLeaderEpoch (key 23), v0-v4: the end offset of a leader epoch (the start of
the next larger epoch, or the log end offset for the current one), from the leader-epoch
cache. Consumers use it to detect truncation after a leader change (KIP-320), followers
to truncate after failover."""


def handle(broker, ctx, req):
    topics = []
    for t in req["topics"]:
        parts = []
        for rp in t["partitions"]:
            idx = rp["partition"]
            res = {"error_code": 0, "partition": idx, "leader_epoch": -1, "end_offset": -1}
            p = broker.partition(t["topic"], idx)
            if p is None:
                res["error_code"] = broker.partition_error(t["topic"], idx)
            elif fenced := p.leader_epoch_error(rp.get("current_leader_epoch", -1)):
                res["error_code"] = fenced
            else:
                epoch, end = p.log.end_offset_for_epoch(rp["leader_epoch"])
                res["leader_epoch"], res["end_offset"] = epoch, end
            parts.append(res)
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
