"""The transaction coordinator (exactly-once, KIP-98) on `__transaction_state`.

* `records`: the byte formats of the `__transaction_state` records (Kafka's).
* `state`: TransactionMetadata and its state machine (pure, no I/O).
* `service`: the per-worker TransactionService (one coordinator state per owned
  `__transaction_state` partition, log appends, marker writing, timers).
* `channel`: a minimal Kafka client connection to other brokers (WriteTxnMarkers and
  AddPartitionsToTxn verification in cluster mode).
"""
