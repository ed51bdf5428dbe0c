"""The ZooKeeper controller (cluster mode): runs in every broker's controller process when
`zookeeper.connect` is set, instead of the EmbeddedController, with the same
worker-facing methods (`ZkController`, composed of one part per concept):

* `session.py`: the one kazoo session of the broker (its registration and, when
  elected, its controllership), bridged to the process's asyncio loop (kazoo calls
  its callbacks on its own threads; they only hand the event to the loop).
* `cache.py`: the cache of the znodes every broker watches (formats and paths:
  `mpbroker/controller/zkdata.py`) and the `ClusterMetadata` view built from it, which
  `controller.py` pushes to the workers whenever it changes, with a strictly
  increasing `epoch`.
* `controllership.py`: the election of the active controller (`/controller` with an
  increment of `/controller_epoch`, one multi-op), the epoch fencing of every one of its
  writes, partition state writes and elections (rules: `mpbroker/controller/elections.py`).
* `channel.py`: LeaderAndIsr / UpdateMetadata / StopReplica from the active controller
  to every broker over the Kafka protocol, and the receiving broker's checks.
* `deletion.py`: topic deletion (Kafka's TopicDeletionManager).
* `reassignment.py`: partition reassignments (KIP-455).
* `isr.py`: AlterPartition from leaders (checks: `mpbroker/controller/isr_change.py`)
  and controlled shutdown, both sides.
* `admin.py`: CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, internal
  topics and producer id blocks, served by any broker.
* `scram_users.py`: AlterUserScramCredentials (`/config/users/<user>`, a
  `/config/changes` notification), served by any broker; `cache.py` watches the users.
* `acls.py`: the ACLs (`/kafka-acl...`, Kafka's layout), written by any broker and
  reloaded by every broker on their change notifications.
* `controller.py`: `ZkController`, which wires the parts, registers the broker, runs the
  controller loop and handles session expiry.

Ownership: this process is the only one of its broker that talks to ZooKeeper; all the
work runs on its asyncio loop.
"""
from mpbroker.controller.zk.controller import ZkController

__all__ = ["ZkController"]
