"""OffsetDelete (key 47), v0. As Kafka's KafkaApis: partitions of topics (or partition
indexes) that do not exist answer UNKNOWN_TOPIC_OR_PARTITION and never reach the
coordinator; the rest goes to the group's coordinator (GROUP_SUBSCRIBED_TO_TOPIC for
topics a live consumer group subscribes to). A group-level error (GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP, NOT_COORDINATOR, ...) is the whole answer, without partitions."""
from workers.handlers._groups import call_for_known_partitions, coordinator


def handle(broker, ctx, req):
    coord, err = coordinator(broker, req["group_id"])
    if coord is None:
        return {"error_code": err, "throttle_time_ms": 0, "topics": []}
    return call_for_known_partitions(broker, coord.offset_delete, req, ctx.api_version)
