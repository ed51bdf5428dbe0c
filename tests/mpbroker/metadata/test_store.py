"""Tests for mpbroker.metadata.store: the metadata file and meta.properties."""
import os

import pytest

from mpbroker.metadata import model as m
from mpbroker.metadata.store import (
    InconsistentBrokerIdError, InconsistentClusterIdError, MetadataStore, MetadataStoreError,
    ensure_meta_properties, read_meta_properties, write_meta_properties,
)
from tests.mpbroker.metadata.test_model import cluster


def test_store_save_load_atomic(tmp_path):
    store = MetadataStore(str(tmp_path))
    assert store.load() is None
    md = m.create_topic(cluster(), "t", 2, 1)
    store.save(md)
    assert store.path == str(tmp_path / "__mpbroker_metadata" / "metadata.json")
    assert not os.path.exists(store.path + ".tmp")
    assert MetadataStore(str(tmp_path)).load() == md
    md2 = m.delete_topic(md, "t")
    store.save(md2)
    assert store.load() == md2
    with pytest.raises(MetadataStoreError, match="older epoch"):
        store.save(md)


def test_store_corrupt_file(tmp_path):
    store = MetadataStore(str(tmp_path))
    os.makedirs(store.dir)
    with open(store.path, "w") as f:
        f.write("{not json")
    with pytest.raises(MetadataStoreError, match="Corrupt"):
        store.load()


def test_meta_properties_write_read(tmp_path):
    write_meta_properties(str(tmp_path), 3, "abc", now_s=0)
    text = (tmp_path / "meta.properties").read_text()
    assert text.startswith("#\n#") and "version=0\nbroker.id=3\ncluster.id=abc\n" in text
    assert read_meta_properties(str(tmp_path)) == {"version": "0", "broker.id": "3", "cluster.id": "abc"}
    assert read_meta_properties(str(tmp_path / "none")) is None
    (tmp_path / "meta.properties").write_text("version=1\nbroker.id=3\n")
    with pytest.raises(MetadataStoreError, match="Unrecognized version"):
        read_meta_properties(str(tmp_path))


def test_ensure_meta_properties(tmp_path):
    d1, d2 = str(tmp_path / "a"), str(tmp_path / "b")
    # fresh: generated broker id above reserved.broker.max.id, given cluster id written everywhere
    assert ensure_meta_properties([d1, d2], -1, "CID") == (1001, "CID")
    assert read_meta_properties(d2)["broker.id"] == "1001"
    # restart with broker.id unset: adopt stored id and cluster id
    assert ensure_meta_properties([d1, d2], -1, None) == (1001, "CID")
    with pytest.raises(InconsistentBrokerIdError, match="Configured broker.id 5 doesn't match stored broker.id"):
        ensure_meta_properties([d1, d2], 5, "CID")
    with pytest.raises(InconsistentClusterIdError, match="doesn't match stored clusterId"):
        ensure_meta_properties([d1, d2], 1001, "OTHER")
    write_meta_properties(d2, 7, "CID")
    with pytest.raises(InconsistentBrokerIdError, match="Failed to match broker.id across log.dirs"):
        ensure_meta_properties([d1, d2], -1, "CID")
    # a new empty dir gets the file
    d3 = str(tmp_path / "c")
    write_meta_properties(d2, 1001, "CID")
    ensure_meta_properties([d1, d2, d3], 1001, "CID")
    assert read_meta_properties(d3)["cluster.id"] == "CID"
    # no cluster id anywhere: one is generated
    d4 = str(tmp_path / "d")
    bid, cid = ensure_meta_properties([d4], 0, None)
    assert bid == 0 and len(cid) == 22


def test_store_writes_compact_json_and_reads_the_file_once(tmp_path, monkeypatch):
    md = m.create_topic(cluster(1), "t", 50, 1)
    store = MetadataStore(str(tmp_path))
    store.save(md)
    size = os.path.getsize(store.path)
    assert size < 120 * 50 + 2000                     # about 100 bytes a partition
    loads = []
    real = MetadataStore.load
    monkeypatch.setattr(MetadataStore, "load", lambda self: loads.append(1) or real(self))
    for i in range(5):
        md = m.create_topic(md, f"x{i}", 1, 1)
        store.save(md)
    assert loads == []
    assert MetadataStore(str(tmp_path)).load() == md
