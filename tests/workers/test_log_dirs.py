"""workers/log_dirs.py: what is in a worker's log dirs and where a new log goes."""
import os

from workers import log_dirs


def mkdirs(root, *names, metadata=()):
    for n in names:
        os.makedirs(root / n)
    for n in metadata:
        (root / n / "partition.metadata").write_text(
            "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")


def test_stored_topic_id(tmp_path):
    mkdirs(tmp_path, "t-0", "t-1", metadata=["t-0"])
    assert log_dirs.stored_topic_id(str(tmp_path / "t-0")) == b"\x00" * 15 + b"\x01"
    assert log_dirs.stored_topic_id(str(tmp_path / "t-1")) is None


def test_strays_are_owned_unhosted_cluster_logs_and_leftover_deletes(tmp_path):
    gone = "t-3.0123456789abcdef0123456789abcdef-delete"
    mkdirs(tmp_path, "t-0", "t-1", "t-2", "u-0", gone, "not-a-partition",
           metadata=["t-0", "t-1", "u-0"])
    owns = lambda topic, index: topic == "t"          # noqa: E731
    found = sorted(os.path.basename(p) for p in log_dirs.strays(str(tmp_path), owns,
                                                                  hosted={("t", 0)}))
    # t-0 hosted, t-2 not written in cluster mode, u-0 another worker's
    assert found == sorted(["t-1", gone])


def test_delete_dir_renames_then_removes(tmp_path):
    mkdirs(tmp_path, "t-0")
    log_dirs.delete_dir(str(tmp_path / "t-0"))
    assert os.listdir(tmp_path) == []


def test_existing_and_least_used(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    mkdirs(tmp_path, "a/t-0", "a/t-1", "b/t-2")
    assert log_dirs.existing([str(a), str(b)], "t-2") == (str(b / "t-2"), None)
    assert log_dirs.existing([str(a), str(b)], "t-9") == (None, None)
    assert log_dirs.partitions_in(str(a)) == 2
    assert log_dirs.least_used([str(a), str(b)], None) == str(b)
    counts = {}
    picks = [log_dirs.least_used([str(a), str(b)], counts) for _ in range(3)]
    assert picks == [str(b), str(a), str(b)] and counts == {str(a): 3, str(b): 3}


def test_usable(tmp_path):
    assert log_dirs.usable(str(tmp_path))
    assert not log_dirs.usable(str(tmp_path / "missing"))
