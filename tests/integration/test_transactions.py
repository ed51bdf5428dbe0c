"""Transactions (exactly-once) against the real broker with unmodified clients.

The broker runs several workers (num.workers defaults to the CPU count), so the
transaction coordinator, the group coordinator and the partitions usually live on
different workers and every path crosses the worker mesh. Producers: confluent-kafka
(librdkafka) and aiokafka transactional producers. Readers: read_committed consumers of
confluent-kafka, kafka-python and aiokafka, which must see exactly the committed
records. Admin: kafka-python's ListTransactions / DescribeTransactions. Error answers
are checked with raw requests built here field by field (not with mpbroker's codec): v0
and v2 (the same layout; PRODUCER_FENCED exists from v2 on, older versions get
INVALID_PRODUCER_EPOCH) and InitProducerId v3/v4 (flexible, KIP-360 id and epoch).
"""
from __future__ import annotations

import asyncio
import struct
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.integration import broker as harness
from tests.integration.broker import build_record_batch, connect, frame_request, recv_frame

TIMEOUT = 30.0


def _tid() -> str:
    return f"txn-{uuid.uuid4().hex[:10]}"


def txn_producer(bootstrap: str, tid: str | None = None, **conf):
    return harness.producer(bootstrap, **{"transactional.id": tid or _tid(),
                                          "transaction.timeout.ms": 60000, **conf})


def wait_txn_state(broker, tid: str, want: str) -> None:
    """Until DescribeTransactions says `tid` is in state `want`."""
    from kafka import KafkaAdminClient
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        def state():
            got = a.describe_transactions([tid])[tid].state
            return getattr(got, "value", got)
        harness.wait_until(lambda: state() == want, TIMEOUT, f"transaction {tid} {want}", broker)
    finally:
        a.close()


def read_confluent(bootstrap: str, topic: str, partitions: int, n: int, *,
                   committed: bool = True, extra_s: float = 1.0) -> list[bytes]:
    c = harness.consumer(bootstrap, **{"isolation.level": "read_committed" if committed
                                       else "read_uncommitted"})
    try:
        harness.assign_from_beginning(c, topic, partitions)
        out = []
        deadline = time.monotonic() + TIMEOUT
        quiet_until = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) >= n:
                quiet_until = quiet_until or time.monotonic() + extra_s
                if time.monotonic() >= quiet_until:
                    break
        return out
    finally:
        c.close()


def read_kafka_python(bootstrap: str, topic: str, partitions: int, n: int,
                      extra_s: float = 1.0) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=500)
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + TIMEOUT
        quiet_until = None
        while time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(r.value for r in recs)
            if len(out) >= n:
                quiet_until = quiet_until or time.monotonic() + extra_s
                if time.monotonic() >= quiet_until:
                    break
        return out
    finally:
        c.close()


def read_aiokafka(bootstrap: str, topic: str, partitions: int, n: int,
                  extra_s: float = 1.0) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            tps = [ATP(topic, p) for p in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            out = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TIMEOUT
            quiet_until = None
            while loop.time() < deadline:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in recs)
                if len(out) >= n:
                    quiet_until = quiet_until or loop.time() + extra_s
                    if loop.time() >= quiet_until:
                        break
            return out
        finally:
            await c.stop()
    return asyncio.run(asyncio.wait_for(go(), TIMEOUT + 15))


def run_txn(p, topic: str, values: list[bytes], partitions: int, commit: bool = True) -> None:
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    p.flush(TIMEOUT)
    if commit:
        p.commit_transaction(TIMEOUT)
    else:
        p.abort_transaction(TIMEOUT)


def vals(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# ------------------------------------------------------------------ raw requests (v0)
def _s(x: str | None) -> bytes:
    if x is None:
        return struct.pack(">h", -1)
    b = x.encode()
    return struct.pack(">h", len(b)) + b


def _cs(x: str | None) -> bytes:
    """Compact nullable string (flexible versions), for strings under 127 bytes."""
    if x is None:
        return b"\x00"
    b = x.encode()
    assert len(b) < 127
    return bytes([len(b) + 1]) + b


def raw(bootstrap: str, api_key: int, version: int, body: bytes) -> bytes:
    s = connect(bootstrap)
    try:
        s.sendall(frame_request(api_key, version, 7, body))
        frame = recv_frame(s)
    finally:
        s.close()
    assert struct.unpack_from(">i", frame, 0)[0] == 7
    return frame[4:]


def find_txn_coordinator(bootstrap: str, tid: str, key_type: int = 1) -> None:
    """FindCoordinator v1 (key_type 1: transaction, 0: group) until the coordinator is
    there (creates the internal topic)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        resp = raw(bootstrap, 10, 1, _s(tid) + bytes([key_type]))
        throttle, err = struct.unpack_from(">ih", resp, 0)
        if err == 0 or time.monotonic() > deadline:
            assert err == 0
            return
        time.sleep(0.1)


def init_producer_id_v0(bootstrap: str, tid: str | None, timeout_ms: int) -> tuple[int, int, int]:
    resp = raw(bootstrap, 22, 0, _s(tid) + struct.pack(">i", timeout_ms))
    _, err, pid, epoch = struct.unpack_from(">ihqh", resp, 0)
    return err, pid, epoch


def init_producer_id_v3(bootstrap: str, tid: str | None, pid: int, epoch: int,
                        version: int = 3) -> tuple[int, int, int]:
    """InitProducerId v3/v4 (flexible: request header v2, response header v1), carrying
    the producer id and epoch of KIP-360."""
    body = b"\x00" + _cs(tid) + struct.pack(">iqh", 60000, pid, epoch) + b"\x00"
    resp = raw(bootstrap, 22, version, body)
    _, err, pid, epoch = struct.unpack_from(">ihqh", resp, 1)    # after the header tags
    return err, pid, epoch


def init_until_ok(bootstrap: str, tid: str, timeout_ms: int = 60000) -> tuple[int, int]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        err, pid, epoch = init_producer_id_v0(bootstrap, tid, timeout_ms)
        if err == 0:
            return pid, epoch
        assert err in (14, 15, 16, 51) and time.monotonic() < deadline, err
        time.sleep(0.1)


def add_partitions_raw(bootstrap, tid, pid, epoch, topic, parts, version=0) -> dict[int, int]:
    """AddPartitionsToTxn v0-v2 -> {partition: error code}."""
    body = _s(tid) + struct.pack(">qh", pid, epoch) + struct.pack(">i", 1) + _s(topic)
    body += struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    resp = raw(bootstrap, 24, version, body)
    pos = 4
    (nt,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    out = {}
    for _ in range(nt):
        (tl,) = struct.unpack_from(">h", resp, pos)
        pos += 2 + tl
        (np_,) = struct.unpack_from(">i", resp, pos)
        pos += 4
        for _ in range(np_):
            p, err = struct.unpack_from(">ih", resp, pos)
            pos += 6
            out[p] = err
    return out


def end_txn_raw(bootstrap, tid, pid, epoch, commit: bool, version=0) -> int:
    """EndTxn v0-v2 -> error code."""
    resp = raw(bootstrap, 26, version, _s(tid) + struct.pack(">qhb", pid, epoch, int(commit)))
    return struct.unpack_from(">ih", resp, 0)[1]


def add_offsets_raw(bootstrap, tid, pid, epoch, group, version=0) -> int:
    """AddOffsetsToTxn v0-v2 -> error code."""
    resp = raw(bootstrap, 25, version, _s(tid) + struct.pack(">qh", pid, epoch) + _s(group))
    return struct.unpack_from(">ih", resp, 0)[1]


def txn_batch(values, pid, epoch, seq=0) -> bytes:
    """build_record_batch with the transactional attribute bit (0x10) and a fixed CRC."""
    import crc32c
    b = bytearray(build_record_batch([(None, v) for v in values], producer_id=pid,
                                     producer_epoch=epoch, base_sequence=seq))
    struct.pack_into(">h", b, 21, 0x10)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


# ================================================================== tests
def test_commit_and_abort_seen_by_every_read_committed_client(broker, make_topic):
    topic = make_topic(partitions=3)
    p = txn_producer(broker.bootstrap)
    p.init_transactions(TIMEOUT)
    run_txn(p, topic, vals("a", 9), 3)
    run_txn(p, topic, vals("b", 9), 3, commit=False)
    run_txn(p, topic, vals("c", 9), 3)
    # records of an open transaction are not visible either
    p.begin_transaction()
    for i, v in enumerate(vals("d", 3)):
        p.produce(topic, value=v, partition=i % 3)
    p.flush(TIMEOUT)
    want = sorted(vals("a", 9) + vals("c", 9))
    assert sorted(read_confluent(broker.bootstrap, topic, 3, 18)) == want
    assert sorted(read_kafka_python(broker.bootstrap, topic, 3, 18)) == want
    assert sorted(read_aiokafka(broker.bootstrap, topic, 3, 18)) == want
    # read_uncommitted sees everything, aborted and open ones included
    everything = read_confluent(broker.bootstrap, topic, 3, 30, committed=False)
    assert sorted(everything) == sorted(want + vals("b", 9) + vals("d", 3))
    p.commit_transaction(TIMEOUT)
    assert sorted(read_confluent(broker.bootstrap, topic, 3, 21)) == sorted(want + vals("d", 3))


def test_consume_transform_produce_with_offsets(broker, make_topic):
    src = make_topic(partitions=2)
    dst = make_topic(partitions=2)
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    plain = harness.producer(broker.bootstrap)
    for i in range(10):
        plain.produce(src, value=f"in-{i}".encode(), partition=i % 2)
    harness.flush(plain)
    c = harness.consumer(broker.bootstrap, **{"group.id": group, "isolation.level": "read_committed"})
    tid = _tid()
    p = txn_producer(broker.bootstrap, tid)
    p.init_transactions(TIMEOUT)
    try:
        c.subscribe([src])

        def process(n: int, commit: bool) -> list:
            got = harness.consume(c, n)
            p.begin_transaction()
            for m in got:
                p.produce(dst, value=m.value().replace(b"in", b"out"), partition=m.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()),
                                          c.consumer_group_metadata(), TIMEOUT)
            p.flush(TIMEOUT)
            p.commit_transaction(TIMEOUT) if commit else p.abort_transaction(TIMEOUT)
            return got

        process(10, commit=True)

        def committed() -> dict:
            tps = [TopicPartition(src, i) for i in range(2)]
            return {tp.partition: tp.offset for tp in c.committed(tps, timeout=TIMEOUT)}

        deadline = time.monotonic() + TIMEOUT
        while committed() != {0: 5, 1: 5}:
            assert time.monotonic() < deadline, committed()
            time.sleep(0.2)
        # an aborted round: its output and its offsets vanish
        for i in range(10, 14):
            plain.produce(src, value=f"in-{i}".encode(), partition=i % 2)
        harness.flush(plain)
        process(4, commit=False)
        wait_txn_state(broker, tid, "CompleteAbort")      # its markers are written
        assert committed() == {0: 5, 1: 5}
    finally:
        c.close()
    out = read_confluent(broker.bootstrap, dst, 2, 10)
    assert sorted(out) == sorted(f"out-{i}".encode() for i in range(10))


def test_zombie_producer_is_fenced(broker, make_topic):
    topic = make_topic(partitions=1)
    tid = _tid()
    old = txn_producer(broker.bootstrap, tid)
    old.init_transactions(TIMEOUT)
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    old.flush(TIMEOUT)
    new = txn_producer(broker.bootstrap, tid)
    new.init_transactions(TIMEOUT)        # aborts the zombie's transaction, bumps the epoch
    with pytest.raises(KafkaException) as exc:
        old.commit_transaction(TIMEOUT)
    err = exc.value.args[0]
    assert err.fatal() and err.code() == KafkaError._FENCED, err
    run_txn(new, topic, [b"fresh"], 1)
    assert read_confluent(broker.bootstrap, topic, 1, 1) == [b"fresh"]


def test_aiokafka_zombie_producer_is_fenced(broker, make_topic):
    """aiokafka speaks EndTxn/AddPartitionsToTxn v0, which has no PRODUCER_FENCED: the
    zombie must get INVALID_PRODUCER_EPOCH, which aiokafka raises as ProducerFenced."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced
    topic = make_topic(partitions=2)
    tid = _tid()

    async def go():
        old = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
        new = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
        await old.start()
        try:
            async with old.transaction():
                await old.send_and_wait(topic, b"before", partition=0)
            await old.begin_transaction()
            for i in range(2):
                await old.send_and_wait(topic, f"zombie-{i}".encode(), partition=i)
            await new.start()     # fences old: aborts its open transaction, bumps the epoch
            with pytest.raises(ProducerFenced):
                await asyncio.wait_for(old.commit_transaction(), TIMEOUT)
            async with new.transaction():
                for i in range(2):
                    await new.send_and_wait(topic, f"fresh-{i}".encode(), partition=i)
        finally:
            await new.stop()
            try:
                await old.stop()
            except ProducerFenced:
                pass
    asyncio.run(asyncio.wait_for(go(), TIMEOUT + 15))
    want = sorted([b"before", b"fresh-0", b"fresh-1"])
    assert sorted(read_aiokafka(broker.bootstrap, topic, 2, 3)) == want
    assert sorted(read_kafka_python(broker.bootstrap, topic, 2, 3)) == want
    assert sorted(read_confluent(broker.bootstrap, topic, 2, 3)) == want


def test_aiokafka_transactional_producer(broker, make_topic):
    from aiokafka import AIOKafkaProducer
    topic = make_topic(partitions=2)

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_tid(),
                             enable_idempotence=True)
        await p.start()
        try:
            async with p.transaction():
                for i in range(4):
                    await p.send(topic, value=f"ok-{i}".encode(), partition=i % 2)
            await p.begin_transaction()
            for i in range(4):
                await p.send(topic, value=f"no-{i}".encode(), partition=i % 2)
            await p.abort_transaction()
        finally:
            await p.stop()
    asyncio.run(asyncio.wait_for(go(), TIMEOUT + 15))
    want = sorted(f"ok-{i}".encode() for i in range(4))
    assert sorted(read_aiokafka(broker.bootstrap, topic, 2, 4)) == want
    assert sorted(read_confluent(broker.bootstrap, topic, 2, 4)) == want


def test_kafka_python_transactional_producer_with_offsets(broker, make_topic):
    """kafka-python speaks the flexible versions (InitProducerId v4, AddPartitionsToTxn v3,
    AddOffsetsToTxn v3, TxnOffsetCommit v3, EndTxn v3)."""
    from kafka import KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    topic = make_topic(partitions=2)
    src = make_topic(partitions=1)
    group = f"kp-{uuid.uuid4().hex[:6]}"
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_tid())
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, value=f"kp-ok-{i}".encode(), partition=i % 2)
        p.send_offsets_to_transaction({KTP(src, 0): OffsetAndMetadata(7, "", -1)}, group)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, value=f"kp-no-{i}".encode(), partition=i % 2)
        p.send_offsets_to_transaction({KTP(src, 0): OffsetAndMetadata(9, "", -1)}, group)
        p.abort_transaction()
    finally:
        p.close()
    want = sorted(f"kp-ok-{i}".encode() for i in range(4))
    assert sorted(read_kafka_python(broker.bootstrap, topic, 2, 4)) == want
    c = harness.consumer(broker.bootstrap, **{"group.id": group})
    try:
        deadline = time.monotonic() + TIMEOUT
        while c.committed([TopicPartition(src, 0)], timeout=TIMEOUT)[0].offset != 7:
            assert time.monotonic() < deadline      # the committed one, never the aborted 9
            time.sleep(0.1)
    finally:
        c.close()


def test_list_and_describe_transactions(broker, make_topic):
    from kafka import KafkaAdminClient
    topic = make_topic(partitions=2)
    tid = _tid()
    p = txn_producer(broker.bootstrap, tid)
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"x", partition=1)
    p.flush(TIMEOUT)
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)

    def listing(**filters) -> list:
        return [t for per_broker in a.list_transactions(**filters).values() for t in per_broker
                if t.transactional_id == tid]

    def state(desc) -> str:
        return getattr(desc.state, "value", desc.state)

    try:
        mine = listing()
        assert len(mine) == 1 and getattr(mine[0].state, "value", mine[0].state) == "Ongoing"
        assert listing(state_filters=["CompleteCommit"]) == []
        assert len(listing(state_filters=["Ongoing", "Empty"])) == 1
        assert listing(producer_id_filters=[mine[0].producer_id + 1]) == []
        assert len(listing(producer_id_filters=[mine[0].producer_id])) == 1
        assert listing(duration_filter_ms=3_600_000) == []
        d = a.describe_transactions([tid])[tid]
        assert state(d) == "Ongoing" and d.producer_id == mine[0].producer_id
        assert d.transaction_timeout_ms == 60000 and d.transaction_start_time_ms > 0
        assert {(tp.topic, tp.partition) for tp in d.topic_partitions} == {(topic, 1)}
        p.commit_transaction(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while state(a.describe_transactions([tid])[tid]) != "CompleteCommit":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert a.describe_transactions([tid])[tid].topic_partitions == set()
        with pytest.raises(Exception) as exc:
            a.describe_transactions([_tid()])
        assert "TransactionalIdNotFound" in type(exc.value).__name__
    finally:
        a.close()


def test_coordinator_errors(broker, make_topic):
    topic = make_topic(partitions=2)
    tid = _tid()
    find_txn_coordinator(broker.bootstrap, tid)
    # transaction.max.timeout.ms defaults to 15 minutes
    assert init_producer_id_v0(broker.bootstrap, tid, 900001)[0] == 50   # INVALID_TRANSACTION_TIMEOUT
    assert init_producer_id_v0(broker.bootstrap, tid, 0)[0] == 50
    assert init_producer_id_v0(broker.bootstrap, "", 1000)[0] == 42      # INVALID_REQUEST
    assert end_txn_raw(broker.bootstrap, tid, 1, 0, True) == 49    # INVALID_PRODUCER_ID_MAPPING
    pid, epoch = init_until_ok(broker.bootstrap, tid)
    assert end_txn_raw(broker.bootstrap, tid, pid, epoch, True) == 48    # INVALID_TXN_STATE (Empty)
    assert add_partitions_raw(broker.bootstrap, tid, pid + 1, epoch, topic, [0]) == {0: 49}
    # a wrong epoch: INVALID_PRODUCER_EPOCH before v2, PRODUCER_FENCED from v2 on
    assert add_partitions_raw(broker.bootstrap, tid, pid, epoch + 1, topic, [0]) == {0: 47}
    assert add_partitions_raw(broker.bootstrap, tid, pid, epoch + 1, topic, [0], 2) == {0: 90}
    assert add_partitions_raw(broker.bootstrap, tid, pid, epoch, "no-such-topic", [0]) == {0: 3}
    assert add_partitions_raw(broker.bootstrap, tid, pid, epoch, topic, [0, 7]) == {0: 55, 7: 3}
    assert add_partitions_raw(broker.bootstrap, tid, pid, epoch, topic, [0]) == {0: 0}
    # a second InitProducerId fences the ongoing transaction: retriable until aborted
    pid2, epoch2 = init_until_ok(broker.bootstrap, tid)
    assert pid2 == pid and epoch2 == epoch + 2
    # the fenced producer, by version: INVALID_PRODUCER_EPOCH (47) to the versions that
    # predate PRODUCER_FENCED (90) (aiokafka speaks v0 only, librdkafka EndTxn v1)
    for version, code in ((0, 47), (1, 47), (2, 90)):
        assert end_txn_raw(broker.bootstrap, tid, pid, epoch, False, version) == code
        assert add_offsets_raw(broker.bootstrap, tid, pid, epoch, "g-fenced", version) == code
        assert add_partitions_raw(broker.bootstrap, tid, pid, epoch, topic, [1],
                                  version) == {1: code}
    for version, code in ((3, 47), (4, 90)):      # KIP-360 InitProducerId with the old epoch
        assert init_producer_id_v3(broker.bootstrap, tid, pid, epoch, version)[0] == code
    # the new epoch goes on as if nothing happened
    assert add_partitions_raw(broker.bootstrap, tid, pid2, epoch2, topic, [1]) == {1: 0}
    assert end_txn_raw(broker.bootstrap, tid, pid2, epoch2, False) == 0
    assert end_txn_raw(broker.bootstrap, tid, pid2, epoch2, True) == 48       # INVALID_TXN_STATE


def test_idempotent_init_producer_id_always_hands_out_a_new_id(broker):
    """Without a transactional id, InitProducerId v3+ never bumps the epoch of the id it
    names (Kafka's TransactionCoordinator): a new id at epoch 0 every time, so no client
    can fence another producer's id."""
    err, pid, epoch = init_producer_id_v0(broker.bootstrap, None, 60000)
    assert (err, epoch) == (0, 0) and pid >= 0
    seen = {pid}
    for version in (3, 4):
        for asked in ((pid, 0), (pid, 5), (pid + 1000, 0)):
            err, new_pid, new_epoch = init_producer_id_v3(broker.bootstrap, None, *asked,
                                                          version=version)
            assert (err, new_epoch) == (0, 0) and new_pid not in seen, (version, asked)
            seen.add(new_pid)


def test_produce_to_partition_outside_the_transaction_is_refused(broker, make_topic):
    """KIP-890 part 1: a transactional batch for a partition that AddPartitionsToTxn did
    not add is refused (INVALID_TXN_STATE) and nothing is stored."""
    topic = make_topic(partitions=2)
    tid = _tid()
    find_txn_coordinator(broker.bootstrap, tid)
    pid, epoch = init_until_ok(broker.bootstrap, tid)
    assert add_partitions_raw(broker.bootstrap, tid, pid, epoch, topic, [0]) == {0: 0}

    def produce(partition: int, value: bytes, seq: int) -> int:
        body = (_s(tid) + struct.pack(">hi", -1, 10000) + struct.pack(">i", 1) + _s(topic)
                + struct.pack(">i", 1))
        batch = txn_batch([value], pid, epoch, seq)
        body += struct.pack(">ii", partition, len(batch)) + batch
        resp = raw(broker.bootstrap, 0, 3, body)
        return harness.parse_produce_v3(struct.pack(">i", 7) + resp)[0][2]

    assert produce(1, b"outside", 0) == 48
    assert produce(0, b"inside", 0) == 0
    assert end_txn_raw(broker.bootstrap, tid, pid, epoch, True) == 0
    assert read_confluent(broker.bootstrap, topic, 2, 1) == [b"inside"]


def test_timed_out_transaction_is_aborted(fresh_broker):
    b = fresh_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    topic = harness.create_topic(b.bootstrap, f"timeout-{uuid.uuid4().hex[:6]}", 1)
    tid = _tid()
    p = txn_producer(b.bootstrap, tid, **{"transaction.timeout.ms": 2000,
                                         "message.timeout.ms": 2000,
                                         "socket.timeout.ms": 2000})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"late")
    p.flush(TIMEOUT)
    from kafka import KafkaAdminClient
    a = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        before = a.describe_transactions([tid])[tid]
        assert getattr(before.state, "value", before.state) == "Ongoing"
        deadline = time.monotonic() + TIMEOUT
        while True:      # the coordinator aborts it on its own, with a bumped epoch
            after = a.describe_transactions([tid])[tid]
            if getattr(after.state, "value", after.state) == "CompleteAbort":
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert after.producer_epoch == before.producer_epoch + 1
        assert after.producer_id == before.producer_id
    finally:
        a.close()
    with pytest.raises(KafkaException) as exc:
        p.commit_transaction(TIMEOUT)
    assert exc.value.args[0].code() == KafkaError._FENCED     # its epoch was bumped
    assert read_confluent(b.bootstrap, topic, 1, 0, extra_s=1.5) == []
    assert read_confluent(b.bootstrap, topic, 1, 1, committed=False) == [b"late"]
    # a new producer with the same id works
    p2 = txn_producer(b.bootstrap, tid)
    p2.init_transactions(TIMEOUT)
    run_txn(p2, topic, [b"next"], 1)
    assert read_confluent(b.bootstrap, topic, 1, 1) == [b"next"]


def test_coordinator_state_survives_kill_9(fresh_broker):
    b = fresh_broker()
    topic = harness.create_topic(b.bootstrap, f"restart-{uuid.uuid4().hex[:6]}", 2)
    tid = _tid()
    p = txn_producer(b.bootstrap, tid)
    p.init_transactions(TIMEOUT)
    group = f"g-{uuid.uuid4().hex[:6]}"
    gc = harness.consumer(b.bootstrap, **{"group.id": group})
    gmd = gc.consumer_group_metadata()
    # two TxnOffsetCommits in one transaction: both reach the log (the second is not
    # taken for a duplicate of the first), the last one wins after the restart
    p.begin_transaction()
    for i, v in enumerate(vals("one", 6)):
        p.produce(topic, value=v, partition=i % 2)
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], gmd, TIMEOUT)
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 2)],
                                  gmd, TIMEOUT)
    p.commit_transaction(TIMEOUT)
    gc.close()
    p.begin_transaction()
    for i, v in enumerate(vals("open", 6)):
        p.produce(topic, value=v, partition=i % 2)
    p.flush(TIMEOUT)
    b.restart(hard=True)
    # the new incarnation finds the open transaction in __transaction_state and aborts it
    p2 = txn_producer(b.bootstrap, tid)
    p2.init_transactions(TIMEOUT)
    run_txn(p2, topic, vals("two", 6), 2)
    want = sorted(vals("one", 6) + vals("two", 6))
    assert sorted(read_confluent(b.bootstrap, topic, 2, 12)) == want
    assert sorted(read_kafka_python(b.bootstrap, topic, 2, 12)) == want
    gc = harness.consumer(b.bootstrap, **{"group.id": group})
    try:
        got = gc.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=TIMEOUT)
        assert {tp.partition: tp.offset for tp in got} == {0: 5, 1: 2}
    finally:
        gc.close()


def test_garbage_and_odd_transaction_requests_keep_the_broker_serving(broker, make_topic):
    """Truncated/garbage bodies of every transaction API close that connection (Kafka's
    answer to an unparsable request); well-formed odd values get error codes; the
    coordinator keeps working afterwards."""
    import random
    topic = make_topic(partitions=1)
    tid = _tid()
    find_txn_coordinator(broker.bootstrap, tid)
    rnd = random.Random(8)
    valid = {24: _s(tid) + struct.pack(">qh", 1, 0) + struct.pack(">i", 1) + _s(topic)
             + struct.pack(">ii", 1, 0),
             25: _s(tid) + struct.pack(">qh", 1, 0) + _s("g"),
             26: _s(tid) + struct.pack(">qhb", 1, 0, 1),
             28: _s(tid) + _s("g") + struct.pack(">qh", 1, 0) + struct.pack(">i", 1) + _s(topic)
             + struct.pack(">i", 1) + struct.pack(">iq", 0, 5) + _s(None),
             22: _s(tid) + struct.pack(">i", 1000)}
    for api, body in valid.items():
        for cut in sorted({1, 3, len(body) // 2, len(body) - 1}):
            for payload in (body[:cut], bytes(rnd.randrange(256) for _ in range(cut))):
                s = connect(broker.bootstrap)
                try:
                    s.sendall(frame_request(api, 0, 9, payload))
                    s.settimeout(5)
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if data:      # random bytes may happen to parse: then it is an answer
                        assert struct.unpack_from(">i", data, 4)[0] == 9
                finally:
                    s.close()
    # well-formed, odd values: error codes, never a dead worker
    assert add_partitions_raw(broker.bootstrap, tid, -1, -1, topic, [-5]) == {-5: 3}
    assert end_txn_raw(broker.bootstrap, tid, -1, -1, True) == 49
    resp = raw(broker.bootstrap, 25, 0, _s(tid) + struct.pack(">qh", 1, 0) + _s(""))
    assert struct.unpack_from(">ih", resp, 0)[1] == 24                 # INVALID_GROUP_ID
    find_txn_coordinator(broker.bootstrap, "g", key_type=0)
    resp = raw(broker.bootstrap, 28, 0, valid[28])    # no such producer: not in a transaction
    assert struct.unpack_from(">h", resp, 4 + 4 + 2 + len(topic) + 4 + 4)[0] == 48
    # and the coordinator still works end to end
    p = txn_producer(broker.bootstrap, tid)
    p.init_transactions(TIMEOUT)
    run_txn(p, topic, [b"still-fine"], 1)
    assert read_confluent(broker.bootstrap, topic, 1, 1) == [b"still-fine"]
