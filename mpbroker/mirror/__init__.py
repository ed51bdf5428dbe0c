"""`mpbroker mirror`: MirrorMaker 2's model (KIP-382) between Kafka-compatible clusters.

Modules, from pure to I/O (imports go down this list only):

* `config`      mm2.properties (dedicated mode) -> validated `MirrorConfig` / `FlowConfig`
* `policy`      replication policies (remote topic names, cycle detection)
* `records`     MM2's wire formats of offset syncs, checkpoints and heartbeats
* `offset_sync` when to emit an offset sync, and the store that translates offsets
* `topics`      topic, partition and config sync from source to target (AdminClient)
* `acls`        topic ACL sync from source to target (which bindings, mapped how; AdminClient)
* `checkpoint`  consumer-group offset translation, checkpoints, heartbeats, group sync
* `sinks`       the write side: at-least-once and transactional (exactly-once) delivery
* `task`        the record pipeline of one flow in one process (consumer group member)
* `runner`      a process: its flows, signals, sd_notify, --workers N children
* `status`      `mpbroker mirror --status`: group state and lag, asked of the clusters

All cluster access goes through confluent-kafka (the wire protocol); docs/MIRROR.md has
the design.
"""
