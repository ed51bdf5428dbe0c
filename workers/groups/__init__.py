"""Group coordinator: I/O-free state machines driven by the worker owning a
`__consumer_offsets` partition.

* partitioner.py        group id -> offsets partition (Kafka's hash, bit for bit)
* records.py            `__consumer_offsets` key/value formats (Kafka-readable)
* consumer_metadata.py  the "consumer" embedded protocol (subscription / assignment bytes)
* group.py              ClassicGroup / Member: state machine, protocol vote, offsets
* responses.py          response dicts per API version
* coordinator.py        GroupCoordinator: the parts below over base.py's state and plumbing
* membership.py         JoinGroup / SyncGroup / Heartbeat / LeaveGroup, rebalances, timers
* offsets.py            OffsetCommit / OffsetFetch / TxnOffsetCommit, expiry
* admin.py              ListGroups / DescribeGroups / DeleteGroups / OffsetDelete
* load.py               replay of the partition, unload
* consumer_protocol.py  KIP-848 ConsumerGroupHeartbeat (consumer_group.py its state,
                        consumer_undo.py refused changes, assignors.py the assignors)
* config.py             GroupConfig: the group/offsets keys of the config table, typed
* service.py            GroupService: the coordinators of one worker (load, appends, routing)
* errors.py             the Kafka error codes used here, and append-error mappings
"""
