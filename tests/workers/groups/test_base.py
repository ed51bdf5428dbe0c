"""The coordinator's shared state and plumbing (workers/groups/base.py): the status check
every request starts with, the live partition count, and the typed config."""

from workers.groups import errors
from workers.groups.config import GroupConfig
from workers.groups.partitioner import coordinator_partition

from .harness import make


def test_status_check_of_every_request():
    coord, *_ = make(loaded=False)
    assert coord._check_status(None, "JoinGroup") == errors.INVALID_GROUP_ID
    assert coord._check_status("", "JoinGroup") == errors.INVALID_GROUP_ID
    assert coord._check_status("", "OffsetCommit") == errors.COORDINATOR_LOAD_IN_PROGRESS
    coord.load([])
    assert coord._check_status("g", "JoinGroup") == errors.NONE
    assert coord._check_status("", "OffsetFetch") == errors.NONE   # the legacy "" group
    coord.unload()
    assert coord._check_status("g", "JoinGroup") == errors.NOT_COORDINATOR


def test_partition_count_from_the_callable():
    counts = [None]
    coord, *_ = make(num_partitions=lambda: counts[0])
    other = next(f"g{i}" for i in range(1000) if coordinator_partition(f"g{i}", 3) != 0)
    assert coord._check_status(other, "JoinGroup") == errors.NONE    # no count: no check
    counts[0] = 3
    assert coord._check_status(other, "JoinGroup") == errors.NOT_COORDINATOR


def test_config_is_typed_once():
    coord, *_ = make({"group.max.size": 7})
    assert isinstance(coord.config, GroupConfig) and coord.config.max_group_size == 7
    assert coord.consumer.max_size == coord.config.consumer_max_size
