"""Opening a log (storage/log_recovery.py): recovery after an unclean stop, indexes
rebuilt, partition.metadata, and how a brand-new log is created and made durable."""
import os

import pytest

from storage.log import InconsistentTopicIdError, Log
from tests.conftest import record_fsyncs
from tests.storage.log_harness import all_records, batch, open_log, small_config


def test_clean_shutdown_skips_recovery_unclean_recovers(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i in range(25):
        log.append(batch(2), 0)
    log.update_high_watermark(50)
    log.close()
    assert os.path.exists(os.path.join(log.dir, ".kafka_cleanshutdown"))
    log = open_log(tmp_path, clock)
    assert log.recovered_bytes_truncated == 0
    assert not os.path.exists(os.path.join(log.dir, ".kafka_cleanshutdown"))
    assert (log.log_end_offset, log.high_watermark) == (50, 50)
    log.append(batch(2), 0)
    log.close(clean=False)
    log = open_log(tmp_path, clock)
    assert log.recovered_bytes_truncated > 0                 # the preallocated zeros
    assert [r[0] for r in all_records(log)] == list(range(52))


def test_missing_index_rebuilt_after_clean_shutdown(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i in range(30):
        log.append(batch(2), 0)
    entries = log.segments[0].index.all_entries()
    log.close()
    os.unlink(os.path.join(log.dir, "00000000000000000000.index"))
    log = open_log(tmp_path, clock)
    assert log.segments[0].index.all_entries() == entries
    assert log.read(17, 10).first_offset == 16


def test_partition_metadata_topic_id(tmp_path, clock):
    tid = bytes(range(16))
    log = Log.open(str(tmp_path / "t-3"), small_config(), clock, topic_id=tid)
    assert (log.topic, log.partition) == ("t", 3)
    text = open(os.path.join(log.dir, "partition.metadata")).read()
    assert text.startswith("version: 0\ntopic_id: ") and "=" not in text
    log.close()
    assert Log.open(str(tmp_path / "t-3"), small_config(), clock).topic_id == tid
    with pytest.raises(InconsistentTopicIdError):
        Log.open(str(tmp_path / "t-3"), small_config(), clock, topic_id=b"\x01" * 16)


def test_a_new_log_is_created_with_one_fsync_of_its_parent_dir(tmp_path, clock, monkeypatch):
    made = record_fsyncs(monkeypatch)
    tid = os.urandom(16)
    log = Log.open(str(tmp_path / "new-0"), small_config(), clock, topic_id=tid)
    assert log.created and made == [str(tmp_path)]         # Kafka's way: the parent only
    assert log.topic_id == tid and log.log_end_offset == 0 and not log.recovered
    assert (tmp_path / "new-0" / "partition.metadata").exists()
    made.clear()
    lazy = Log.open(str(tmp_path / "new-1"), small_config(), clock, sync_parent=False)
    assert lazy.created and made == []                       # the caller fsyncs the parent
    again = Log.open(str(tmp_path / "new-1"), small_config(), clock)
    assert not again.created
    lazy.close(clean=False)
    again.close(clean=False)
    log.close()


def test_the_first_flush_of_a_new_log_makes_its_files_durable_first(tmp_path, clock,
                                                                    monkeypatch):
    log = Log.open(str(tmp_path / "new-0"), small_config(), clock, topic_id=os.urandom(16))
    made = record_fsyncs(monkeypatch)
    log.append(batch(2), 0)
    log.flush()
    d = str(tmp_path / "new-0")
    seg = os.path.join(d, "00000000000000000000.log")
    meta = made.index(os.path.join(d, "partition.metadata"))
    assert d in made[meta:made.index(seg)]                  # then the dir, then the data
    made.clear()
    log.append(batch(2), 0)
    log.flush()                                              # once: no longer
    assert d not in made and os.path.join(d, "partition.metadata") not in made
    log.close()


def test_a_new_log_whose_files_a_crash_lost_opens_again_empty(tmp_path, clock):
    """Not fsynced at creation: a crash may leave the new directory with its files
    missing or empty (nothing was appended, nothing acknowledged): it opens again."""
    tid = os.urandom(16)
    d = tmp_path / "new-0"
    Log.open(str(d), small_config(), clock, topic_id=tid).close(clean=False)
    (d / "partition.metadata").write_bytes(b"")
    for name in os.listdir(d):
        if name.endswith((".index", ".timeindex")):
            os.unlink(d / name)
        elif name.endswith(".log"):
            os.truncate(d / name, 0)
    log = Log.open(str(d), small_config(), clock, topic_id=tid)
    assert log.topic_id == tid and log.log_end_offset == 0
    log.append(batch(2), 0)
    assert [o for o, _, _ in all_records(log)] == [0, 1]
    log.close()
    for name in os.listdir(d):
        os.unlink(d / name)                                  # only the directory left
    log = Log.open(str(d), small_config(), clock, topic_id=tid)
    assert not log.created and log.topic_id == tid and log.log_end_offset == 0
    log.close()
