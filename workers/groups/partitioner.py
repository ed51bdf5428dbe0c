"""Which `__consumer_offsets` partition coordinates a group.

Kafka: `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`, where `hashCode` is
Java's `String.hashCode` (s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, int32
wrap-around) and `Utils.abs` maps Integer.MIN_VALUE to 0 (unlike `Math.abs`, which
returns MIN_VALUE itself, and unlike `Utils.toPositive`, which masks the sign bit).
Clients and tools compute the same partition, so this must match bit for bit.
"""

_INT32_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: |n|, with Integer.MIN_VALUE mapped to 0."""
    return 0 if n == _INT32_MIN else abs(n)


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return kafka_abs(java_string_hash(group_id)) % num_partitions
