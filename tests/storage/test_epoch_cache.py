from storage.epoch_cache import EpochEntry, LeaderEpochCache


def test_assign_persists_and_reloads(tmp_path):
    c = LeaderEpochCache(str(tmp_path))
    assert c.assign(0, 0)
    assert not c.assign(0, 5)                 # same epoch, later start: ignored
    assert c.assign(2, 10)
    assert c.assign(5, 30)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n5 30\n"
    assert LeaderEpochCache(str(tmp_path)).entries == [(0, 0), (2, 10), (5, 30)]
    assert c.latest_epoch == 5
    assert c.epoch_for_offset(15) == 2 and c.epoch_for_offset(30) == 5


def test_assign_removes_contradicted_entries():
    c = LeaderEpochCache(None)
    c.assign(1, 0)
    c.assign(3, 20)
    c.assign(2, 10)                           # older epoch at lower offset: epoch 3 dropped
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 10)]
    c.assign(4, 5)                            # start below epoch 2's: epoch 2 dropped
    assert c.entries == [EpochEntry(1, 0), EpochEntry(4, 5)]


def test_end_offset_for_matches_kafka():
    c = LeaderEpochCache(None)
    assert c.end_offset_for(3, 100) == (-1, -1)
    c.assign(2, 10)
    c.assign(4, 30)
    c.assign(7, 50)
    assert c.end_offset_for(7, 100) == (7, 100)       # latest: log end offset
    assert c.end_offset_for(4, 100) == (4, 50)
    assert c.end_offset_for(5, 100) == (4, 50)        # unknown epoch between: floor epoch
    assert c.end_offset_for(1, 100) == (1, 10)        # below every epoch
    assert c.end_offset_for(8, 100) == (-1, -1)       # above every epoch
    assert c.end_offset_for(-1, 100) == (-1, -1)


def test_truncation_from_both_ends(tmp_path):
    c = LeaderEpochCache(str(tmp_path))
    for e, o in [(1, 0), (2, 10), (3, 20), (4, 30)]:
        c.assign(e, o)
    c.truncate_from_end(25)
    assert c.entries == [(1, 0), (2, 10), (3, 20)]
    c.truncate_from_end(20)
    assert c.entries == [(1, 0), (2, 10)]
    c.truncate_from_start(15)
    assert c.entries == [(2, 15)]
    c.truncate_from_start(5)                  # below the first entry: no change
    assert c.entries == [(2, 15)]
    assert LeaderEpochCache(str(tmp_path)).entries == [(2, 15)]


def test_corrupt_file_means_empty(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n5 10\n3 20\n")
    assert LeaderEpochCache(str(tmp_path)).entries == []
