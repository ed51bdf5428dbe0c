"""AlterClientQuotas as both controllers answer it (issue #17): each entry's entity and
ops validated (mpbroker/security/quotas.py; a bad one answers INVALID_REQUEST with
Kafka's message and changes nothing of that entry), the others applied in order. The
embedded controller commits the result into the metadata (and so its store); the
ZooKeeper controller writes each changed entity's `/config/...` node.

entries: [(pairs, ops)], pairs [(entity type, name or None)], ops [(key, value,
remove)] -> (new quotas, results [(pairs, error code, message)], changed EntityKeys).
"""
from __future__ import annotations

from mpbroker.protocol.errors import ErrorCode
from mpbroker.security import quotas as q


def apply(quotas, entries, validate_only: bool):
    results, changed = [], []
    for pairs, ops in entries:
        try:
            key = q.entity_key(pairs)
            new = q.alter(quotas, key, ops)
        except q.QuotaError as e:
            results.append((pairs, ErrorCode.INVALID_REQUEST, str(e)))
            continue
        results.append((pairs, ErrorCode.NONE, None))
        if not validate_only:
            quotas = new
            changed.append(key)
    return quotas, results, changed
