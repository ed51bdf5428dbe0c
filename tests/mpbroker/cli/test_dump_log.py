"""`mpbroker dump-log`: crafted files for the edge cases (preallocated zero tails,
garbage, oversized batches, missing files), and the files of a running broker: its
active (preallocated) segment with bounded memory, its indexes, and the internal
topics through --offsets-decoder and --transaction-log-decoder."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mpbroker.cli import main as cli
from storage.batch import BatchBuilder, build_control_batch
from tests.integration.broker import REPO_ROOT, Broker


def dump(capsys, *args) -> tuple[int, list[str], str]:
    rc = cli.main(["dump-log", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def segment(tmp_path: Path, *batches: bytes, tail: bytes = b"", name: str = "00000000000000000010.log") -> Path:
    p = tmp_path / name
    p.write_bytes(b"".join(batches) + tail)
    return p


def test_batches_and_records_in_kafkas_shape(tmp_path, capsys):
    b1 = BatchBuilder(10, clock=lambda: 1000).append(b"k", b"hello").append(None, b"\xff\x00").build()
    b2 = build_control_batch(12, 7, 0, True, 3, 2000)
    p = segment(tmp_path, b1, b2)
    rc, lines, err = dump(capsys, p, "--print-data-log")
    assert rc == 0 and err == ""
    assert lines[0] == f"Dumping {p}"
    assert lines[1] == "Log starting offset: 10"
    assert lines[2].startswith("baseOffset: 10 lastOffset: 11 count: 2 baseSequence: -1 lastSequence: -1 "
                               "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: -1 "
                               "isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
                               f"position: 0 CreateTime: 1000 size: {len(b1)} magic: 2 compresscodec: none crc: ")
    assert lines[2].endswith(" isvalid: true")
    assert lines[3] == ("| offset: 10 CreateTime: 1000 keySize: 1 valueSize: 5 sequence: -1 headerKeys: [] "
                        "key: k payload: hello")
    assert lines[4] == ("| offset: 11 CreateTime: 1000 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] "
                        "key: null payload: \\xff\\x00")
    assert f"position: {len(b1)} " in lines[5] and "isControl: true" in lines[5]
    assert lines[6].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")
    rc, lines, _ = dump(capsys, p)                  # shallow: batches only
    assert rc == 0 and len(lines) == 4
    rc, lines, _ = dump(capsys, "--deep-iteration", p)  # records without their data
    assert rc == 0 and lines[3].endswith("headerKeys: []")


def test_stops_at_the_preallocated_zero_tail(tmp_path, capsys):
    b1 = BatchBuilder(0).append(b"k", b"v").build()
    p = segment(tmp_path, b1, name="00000000000000000000.log")
    with open(p, "r+b") as f:
        f.truncate(64 * 1024 * 1024)                # sparse, like a preallocated active segment
    rc, lines, err = dump(capsys, p)
    assert (rc, err) == (0, "")
    assert len(lines) == 3 and lines[2].startswith("baseOffset: 0 lastOffset: 0 count: 1")


def test_garbage_and_truncation_are_reported(tmp_path, capsys):
    b1 = BatchBuilder(0).append(b"k", b"v").build()
    p = segment(tmp_path, b1, tail=b"\x01garbage-bytes")
    rc, lines, _ = dump(capsys, p)
    assert rc == 1 and lines[-1] == f"Found 14 invalid bytes at the end of {p.name}"
    p = segment(tmp_path, b1, b1[:-3], name="00000000000000000001.log")
    rc, lines, _ = dump(capsys, p)
    assert rc == 1 and lines[-1] == f"Found {len(b1) - 3} invalid bytes at the end of {p.name}"
    corrupt = bytearray(b1)
    corrupt[-1] ^= 0xFF
    p = segment(tmp_path, bytes(corrupt), name="00000000000000000002.log")
    rc, lines, _ = dump(capsys, p)
    assert rc == 0 and lines[2].endswith("isvalid: false")


def test_max_message_size(tmp_path, capsys):
    b1 = BatchBuilder(0).append(b"k", b"x" * 1000).build()
    p = segment(tmp_path, b1)
    rc, lines, _ = dump(capsys, p, "--max-message-size", "100")
    assert rc == 1 and lines[-1] == (f"Found a batch of {len(b1)} bytes at position 0, larger than "
                                     "--max-message-size 100: stopping")


def test_indexes_stop_at_their_zero_tail(tmp_path, capsys):
    idx = tmp_path / "00000000000000000100.index"
    idx.write_bytes(struct.pack(">ii", 5, 4096) + struct.pack(">ii", 9, 8192) + bytes(8 * 1000))
    tidx = tmp_path / "00000000000000000100.timeindex"
    tidx.write_bytes(struct.pack(">qi", 1700, 5) + bytes(12 * 1000))
    txn = tmp_path / "00000000000000000100.txnindex"
    txn.write_bytes(struct.pack(">hqqqq", 0, 42, 100, 110, 100))
    rc, lines, err = dump(capsys, idx, tidx, txn)
    assert (rc, err) == (0, "")
    assert lines == [f"Dumping {idx}", "offset: 105 position: 4096", "offset: 109 position: 8192",
                     f"Dumping {tidx}", "timestamp: 1700 offset: 105",
                     f"Dumping {txn}",
                     "version: 0 producerId: 42 firstOffset: 100 lastOffset: 110 lastStableOffset: 100"]


def test_checkpoints_and_snapshots(tmp_path, capsys):
    from storage.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n3 17\n")
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\norders 2 55\n")
    entry = ProducerStateEntry(9, 1, last_timestamp_ms=5)
    entry.batches.append(BatchMetadata(0, 0, 0, 0, 5))
    snap = tmp_path / "00000000000000000001.snapshot"
    snap.write_bytes(ProducerStateManager.encode_snapshot({9: entry}))
    rc, lines, err = dump(capsys, "--files",
                          f"{tmp_path / 'leader-epoch-checkpoint'},{tmp_path / 'recovery-point-offset-checkpoint'},{snap}")
    assert (rc, err) == (0, "")
    assert lines[1:4] == ["version: 0 entries: 2", "epoch: 0 startOffset: 0", "epoch: 3 startOffset: 17"]
    assert lines[5:7] == ["version: 0 entries: 1", "topic: orders partition: 2 offset: 55"]
    assert lines[8].startswith("producerId: 9 producerEpoch: 1 coordinatorEpoch: -1 "
                               "currentTxnFirstOffset: OptionalLong.empty lastTimestamp: 5")
    assert "firstSequence: 0 lastSequence: 0 lastOffset: 0 offsetDelta: 0" in lines[8]


def test_missing_unreadable_and_unknown_files_are_one_line_each(tmp_path, capsys):
    (tmp_path / "dir.log").mkdir()
    (tmp_path / "x.txt").write_text("x")
    (tmp_path / "00000000000000000000.snapshot").write_bytes(b"nope")
    ok = segment(tmp_path, BatchBuilder(0).append(b"k", b"v").build())
    rc, lines, err = dump(capsys, tmp_path / "missing.log", tmp_path / "dir.log", tmp_path / "x.txt",
                          tmp_path / "00000000000000000000.snapshot", ok)
    assert rc == 1
    assert err.splitlines() == [
        f"mpbroker dump-log: cannot open {tmp_path / 'missing.log'}: No such file or directory",
        f"mpbroker dump-log: {tmp_path / 'dir.log'} is not a regular file",
        f"mpbroker dump-log: ignoring {tmp_path / 'x.txt'}: not a .log, .index, .timeindex, .txnindex, "
        ".snapshot or checkpoint file",
        f"mpbroker dump-log: {tmp_path / '00000000000000000000.snapshot'}: not a producer snapshot: "
        "snapshot too short",
    ]
    assert any(line.startswith("baseOffset: 0") for line in lines)      # the good file still dumped


# ------------------------------------------------------------ a running broker's files

# The max RSS of a process includes its parent's at the fork and exec that made it (Linux
# keeps the high-water mark across exec), so the pytest process, hundreds of MB late in
# a suite, would be counted: a small launcher runs dump-log and reports its child's own.
_LAUNCH = ("import resource, subprocess, sys\n"
           "rc = subprocess.call(sys.argv[1:], stderr=subprocess.STDOUT)\n"
           "sys.stderr.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
           "sys.exit(rc)\n")


def run_dump(*args) -> tuple[int, str, int]:
    """dump-log in its own process: (exit code, stdout, max RSS in KiB of that process)."""
    r = subprocess.run([sys.executable, "-c", _LAUNCH, sys.executable, "-m", "mpbroker.cli.main",
                        "dump-log", *map(str, args)],
                       env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), capture_output=True)
    return r.returncode, r.stdout.decode(), int(r.stderr)


@pytest.mark.integration
def test_running_broker_files(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from workers.groups.partitioner import coordinator_partition

    b = Broker(tmp_path / "b", {"num.workers": "1"}, name="dump-broker").start()
    try:
        topic, group, txn_id = f"dump-{uuid.uuid4().hex[:6]}", "dump-group", "dump-txn"
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": txn_id})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        p.commit_transaction(30)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        c.close()

        seg = b.data_dir / f"{topic}-0" / "00000000000000000000.log"
        size = seg.stat().st_size
        rc, out, rss_kib = run_dump(seg, "--print-data-log")
        assert rc == 0, out
        assert "Found" not in out
        assert "| offset: 2 CreateTime: " in out and "key: k2 payload: v2" in out
        assert "endTxnMarker: COMMIT" in out
        # Bounded memory: the preallocated segment is not read (nor mapped) whole.
        if size > 256 * 1024 * 1024:
            assert rss_kib * 1024 < size / 8, (rss_kib, size)
        assert rss_kib < 200 * 1024

        rc, out, _ = run_dump(seg.with_suffix(".index"), seg.with_suffix(".timeindex"))
        assert rc == 0, out
        assert [line for line in out.splitlines() if not line.startswith("Dumping")] == \
            [line for line in out.splitlines() if line.startswith("timestamp: ")]

        n = int(b.overrides.get("offsets.topic.num.partitions", 50))
        off = b.data_dir / f"__consumer_offsets-{coordinator_partition(group, n)}" / "00000000000000000000.log"
        rc, out, _ = run_dump(off, "--offsets-decoder")
        assert rc == 0, out
        assert (f'key: {{"type":"1","data":{{"group":"{group}","topic":"{topic}","partition":0}}}} '
                f'payload: {{"version":"') in out
        assert '"data":{"offset":3,' in out

        txn_part = coordinator_partition(txn_id, 50)
        tlog = b.data_dir / f"__transaction_state-{txn_part}" / "00000000000000000000.log"
        rc, out, _ = run_dump(tlog, "--transaction-log-decoder")
        assert rc == 0, out
        assert f'key: {{"type":"0","data":{{"transactionalId":"{txn_id}"}}}}' in out
        assert '"transactionStatus":"CompleteCommit"' in out
        assert f'"transactionPartitions":[{{"topic":"{topic}","partitionIds":[0]}}]' in out
    finally:
        b.stop()


def test_max_bytes_and_skip_record_metadata(tmp_path, capsys):
    b1 = BatchBuilder(0, clock=lambda: 1).append(b"a", b"1").build()
    b2 = BatchBuilder(1, clock=lambda: 1).append(b"b", b"2").build()
    p = segment(tmp_path, b1, b2, tail=b"\x01junk-not-reached")
    rc, lines, _ = dump(capsys, p, "--max-bytes", len(b1), "--print-data-log", "--skip-record-metadata")
    assert rc == 0
    assert lines[2:] == [lines[2], "| key: a payload: 1"] and lines[2].startswith("baseOffset: 0 ")


def test_a_first_index_entry_of_zeros_counts_when_entries_follow(tmp_path, capsys):
    idx = tmp_path / "00000000000000000000.index"
    idx.write_bytes(bytes(8) + struct.pack(">ii", 1, 70) + bytes(8 * 10))
    empty = tmp_path / "00000000000000000005.index"
    empty.write_bytes(bytes(8 * 10))
    rc, lines, _ = dump(capsys, idx, empty)
    assert rc == 0 and lines == [f"Dumping {idx}", "offset: 0 position: 0", "offset: 1 position: 70",
                                 f"Dumping {empty}"]

