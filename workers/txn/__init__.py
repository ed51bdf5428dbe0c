"""The transaction coordinator (exactly-once, KIP-98) on `__transaction_state`.

* `records`: the byte formats of the `__transaction_state` records (Kafka's).
* `state`: TransactionMetadata and its state machine (pure, no I/O).
* `service`: the per-worker TransactionService (one coordinator state per owned
  `__transaction_state` partition, log appends through workers/coordinator_log.py,
  timers); `config`: TxnConfig, its keys of the config table, typed.
* `markers`: MarkerSender, the COMMIT/ABORT markers to every partition of a transaction.
* `verifier`: TxnVerifier, the KIP-890 produce check.
* `channel`: a minimal Kafka client connection to other brokers (WriteTxnMarkers and
  AddPartitionsToTxn verification in cluster mode).

KIP-890 (the transaction hazards Jepsen found). Part 1 is implemented: the leader of a
partition refuses a transactional batch (INVALID_TXN_STATE) whose producer's ongoing
transaction does not contain that partition, asking the coordinator with
AddPartitionsToTxn v4 `verify_only` (verifier.py `TxnVerifier`); TxnOffsetCommit is
checked the same way for the group's `__consumer_offsets` partition. That closes the
hanging-transaction hole for every client, since the check needs nothing from them.

Part 2 ("transaction version 2": an epoch bump at the end of every transaction, returned
by EndTxn v5; Produce v12 adding the partition implicitly; AddPartitionsToTxn v5) is
not served, so the epoch of a transactional id moves only on InitProducerId and on a
coordinator-side abort (timeout, fencing). Kafka enables it only for a client that
sends those versions while the broker finalizes the `transaction.version` feature at 2
in its ApiVersions answer; none of the clients this broker is tested with does:
confluent-kafka 2.16.1 (librdkafka 2.16.0) sends EndTxn v1, AddPartitionsToTxn v0 and
Produce up to v10; kafka-python 3.0.12 EndTxn/AddPartitionsToTxn v3 and Produce v9;
aiokafka 0.14.0 v0 and Produce v7; kcat (librdkafka 2.0.2) EndTxn v1 and Produce v7
(seen on the wire and in the clients' sources). So ApiVersions stops at
Produce v11, AddPartitionsToTxn v4, EndTxn v4 and finalizes no `transaction.version`; the
`ClientTransactionVersion` tag of the log value (records.py) is decoded, so that records
Kafka 4.x wrote load, and otherwise ignored: this coordinator writes the default 0.
"""
