"""TxnConfig (workers/txn/config.py): the config table's transaction keys, typed."""

from mpbroker.config import BrokerConfig
from workers.txn.config import APPEND_TIMEOUT_MS, LOAD_BUFFER_BYTES, TxnConfig


def test_keys_and_defaults():
    table = BrokerConfig({})
    cfg = TxnConfig.from_config(table)
    assert cfg.max_timeout_ms == table["transaction.max.timeout.ms"]
    assert cfg.id_expiration_ms == table["transactional.id.expiration.ms"]
    assert (cfg.load_buffer_bytes, cfg.append_timeout_ms) == (LOAD_BUFFER_BYTES, APPEND_TIMEOUT_MS)
    cfg = TxnConfig.from_config(BrokerConfig(
        {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50}))
    assert cfg.abort_interval_ms == 50
