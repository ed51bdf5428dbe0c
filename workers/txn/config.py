"""The transaction coordinator's configuration: a typed, frozen view of the config table.

`TxnConfig.from_config(config)` reads Kafka's transaction keys from the worker's
`BrokerConfig` (mpbroker/config.py: the key table holds their defaults). Two of Kafka's
settings the table does not define are Kafka's defaults here: the load's read size
(transaction.state.log.load.buffer.size, LOAD_BUFFER_BYTES) and how long a state change
waits for the followers (Kafka's TransactionStateManager uses request.timeout.ms,
APPEND_TIMEOUT_MS).
"""
from __future__ import annotations

from dataclasses import dataclass

from mpbroker.config import BrokerConfig

LOAD_BUFFER_BYTES = 5 * 1024 * 1024
APPEND_TIMEOUT_MS = 30000


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int         # transaction.max.timeout.ms
    id_expiration_ms: int       # transactional.id.expiration.ms
    abort_interval_ms: int      # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_interval_ms: int     # transaction.remove.expired.transaction.cleanup.interval.ms
    load_buffer_bytes: int = LOAD_BUFFER_BYTES
    append_timeout_ms: int = APPEND_TIMEOUT_MS

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TxnConfig:
        return cls(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
            load_buffer_bytes=LOAD_BUFFER_BYTES, append_timeout_ms=APPEND_TIMEOUT_MS)
