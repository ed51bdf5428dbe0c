"""workers/payloads.py: a forwarded Produce body as the owner's handler takes it."""
from mpbroker.protocol import api_keys as K
from workers.payloads import detach_records, received_body


def produce_body(*records):
    return {"acks": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": i, "records": r} for i, r in enumerate(records)]}]}


def test_received_records_are_writable_memoryviews():
    body = received_body(K.PRODUCE, produce_body(b"ab", bytearray(b"cd"), None), None)
    recs = [p["records"] for p in body["topic_data"][0]["partition_data"]]
    assert [bytes(r) for r in recs[:2]] == [b"ab", b"cd"] and recs[2] is None
    assert all(isinstance(r, memoryview) and not r.readonly for r in recs[:2])


def test_received_raw_buffers_replace_their_indexes():
    sent, bufs = detach_records(K.PRODUCE, produce_body(memoryview(b"xy")))
    raw = [memoryview(bytearray(b)) for b in bufs]
    body = received_body(K.PRODUCE, sent, raw)
    assert body["topic_data"][0]["partition_data"][0]["records"] is raw[0]


def test_other_apis_pass_through():
    body = {"topics": []}
    assert received_body(K.LIST_OFFSETS, body, None) is body
