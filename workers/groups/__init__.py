"""Group coordinator: I/O-free state machines driven by the worker owning a
`__consumer_offsets` partition.

* partitioner.py        group id -> offsets partition (Kafka's hash, bit for bit)
* records.py            `__consumer_offsets` key/value formats (Kafka-readable)
* consumer_metadata.py  the "consumer" embedded protocol (subscription / assignment bytes)
* group.py              ClassicGroup / Member: state machine, protocol vote, offsets
* responses.py          response dicts per API version
* coordinator.py        GroupCoordinator: the API handlers, timers, load / unload
* errors.py             the Kafka error codes used here, and append-error mappings
"""
