"""`mpbroker mirror --status`: where each flow stands, asked of the clusters themselves
(no state file, so it works from any machine that reaches them, whichever processes
run the flow and wherever they run).

Per flow A->B: the state and member count of its group `mm2-A->B` on A, and per
replicated topic the sum over partitions of A's end offset minus the group's committed
offset (the lag; a partition never committed counts from its start offset). With
exactly-once the committed positions live on B; the pipeline copies them to A after
each transaction, so the same reading holds.
"""
from __future__ import annotations

from typing import Dict, List

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mpbroker.mirror.config import FlowConfig
from mpbroker.mirror.topics import partition_counts

TIMEOUT_S = 15.0


def _offsets(admin: AdminClient, tps: List[TopicPartition], spec) -> Dict[tuple, int]:
    if not tps:
        return {}
    futs = admin.list_offsets({tp: spec for tp in tps}, request_timeout=TIMEOUT_S)
    return {(tp.topic, tp.partition): f.result(TIMEOUT_S).offset for tp, f in futs.items()}


def flow_status(flow: FlowConfig) -> dict:
    admin = AdminClient(flow.client(flow.source, "admin"))
    topics = {t: n for t, n in partition_counts(admin).items() if flow.replicates_topic(t)}
    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    end = _offsets(admin, tps, OffsetSpec.latest())
    start = _offsets(admin, tps, OffsetSpec.earliest())
    committed = {}
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(flow.group_id, tps or None)],
        request_timeout=TIMEOUT_S)[flow.group_id].result(TIMEOUT_S)
    for tp in res.topic_partitions:
        if tp.error is None and tp.offset >= 0:
            committed[(tp.topic, tp.partition)] = tp.offset
    desc = admin.describe_consumer_groups([flow.group_id], request_timeout=TIMEOUT_S)[
        flow.group_id].result(TIMEOUT_S)
    per_topic = {}
    for t, n in sorted(topics.items()):
        lag = sum(max(0, end[(t, p)] - committed.get((t, p), start[(t, p)])) for p in range(n))
        per_topic[t] = {"remote": flow.policy.format_remote_topic(flow.source, t),
                        "partitions": n, "lag": lag,
                        "end": sum(end[(t, p)] for p in range(n))}
    return {"flow": flow.name, "group": flow.group_id, "state": desc.state.name,
            "members": len(desc.members), "exactly_once": flow.exactly_once, "topics": per_topic}


def render(statuses: List[dict]) -> str:
    lines = []
    for s in statuses:
        if "error" in s:
            lines.append(f"{s['flow']}: unreachable: {s['error']}")
            continue
        total = sum(t["lag"] for t in s["topics"].values())
        lines.append(f"{s['flow']}: group {s['group']} {s['state']}, {s['members']} members, "
                     f"{'exactly-once' if s['exactly_once'] else 'at-least-once'}, "
                     f"{len(s['topics'])} topics, lag {total}")
        for t, v in s["topics"].items():
            lines.append(f"  {t} -> {v['remote']}: {v['partitions']} partitions, "
                         f"end {v['end']}, lag {v['lag']}")
    return "\n".join(lines)


def all_status(flows: List[FlowConfig]) -> List[dict]:
    out = []
    for f in flows:
        try:
            out.append(flow_status(f))
        except KafkaException as e:
            out.append({"flow": f.name, "error": e.args[0].str()})
    return out
