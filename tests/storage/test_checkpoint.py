import os

import pytest

from storage.checkpoint import (CheckpointError, CheckpointFile, OffsetCheckpoint,
                                PartitionCheckpoints, atomic_write)


def test_offset_checkpoint_is_kafkas_text_format(tmp_path):
    cp = OffsetCheckpoint(str(tmp_path / "recovery-point-offset-checkpoint"))
    cp.write({("topic-a", 3): 42, ("b", 0): 7})
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == \
        "0\n2\nb 0 7\ntopic-a 3 42\n"
    assert cp.read() == {("topic-a", 3): 42, ("b", 0): 7}
    assert not os.path.exists(cp.path + ".tmp")


def test_missing_file_reads_empty_and_malformed_raises(tmp_path):
    f = CheckpointFile(str(tmp_path / "x"), 0, fields=2)
    assert f.read() == []
    for text in ["", "0\n", "1\n0\n", "0\n2\n1 2\n", "0\n1\n1 x\n", "0\n1\n1 2 3\n", "zz\n0\n"]:
        (tmp_path / "x").write_text(text)
        with pytest.raises(CheckpointError):
            f.read()
    (tmp_path / "x").write_bytes(b"\xff\xfe")
    with pytest.raises(CheckpointError):
        f.read()


def test_atomic_write_replaces_whole_file(tmp_path):
    p = str(tmp_path / "f")
    atomic_write(p, b"old contents that are long")
    atomic_write(p, b"new")
    assert open(p, "rb").read() == b"new"


def test_partition_checkpoints_and_marker(tmp_path):
    d = str(tmp_path)
    pc = PartitionCheckpoints(d, "t", 1)
    assert pc.read() == {}
    pc.write(recovery_point=10, log_start_offset=2, high_watermark=9)
    again = PartitionCheckpoints(d, "t", 1)
    assert again.read() == {"recovery_point": 10, "log_start_offset": 2, "high_watermark": 9}
    # unchanged values are not rewritten
    mtime = os.stat(os.path.join(d, "replication-offset-checkpoint")).st_mtime_ns
    os.unlink(os.path.join(d, "log-start-offset-checkpoint"))
    again.write(recovery_point=11, log_start_offset=2, high_watermark=9)
    assert not os.path.exists(os.path.join(d, "log-start-offset-checkpoint"))
    assert os.stat(os.path.join(d, "replication-offset-checkpoint")).st_mtime_ns == mtime
    # a corrupt file just loses its key
    (tmp_path / "replication-offset-checkpoint").write_text("garbage")
    assert PartitionCheckpoints(d, "t", 1).read() == {"recovery_point": 11}
    assert not pc.had_clean_shutdown()
    pc.write_clean_shutdown()
    assert pc.had_clean_shutdown()
    pc.clear_clean_shutdown()
    pc.clear_clean_shutdown()
    assert not pc.had_clean_shutdown()
