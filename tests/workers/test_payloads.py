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


def test_fetch_slices_cross_as_plain_tuples_and_come_back_as_file_slices():
    import pickle

    from storage.slices import FileSlice
    from workers.payloads import pin_records, sanitize_response
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": [FileSlice("/d/0.log", 5, 10, 42, 7, 99),
                                           memoryview(b"converted")]},
        {"partition_index": 1, "records": []}, {"partition_index": 2, "records": b""}]}]}
    sent = pickle.loads(pickle.dumps(sanitize_response(K.FETCH, body), 5))
    p0, p1, p2 = sent["responses"][0]["partitions"]
    assert p0["records"] == [("/d/0.log", 5, 10, -1, 7, 99), b"converted"]
    assert type(p0["records"][0]) is tuple                 # no NamedTuple on the wire

    class Conn:
        def pin(self, s):
            assert type(s) is FileSlice
            return s._replace(fd=3)
    got = pin_records(p0, Conn())["records"]
    assert got == [FileSlice("/d/0.log", 5, 10, 3, 7, 99), b"converted"]
    assert type(got[0]) is FileSlice
    assert type(pin_records(p0, None)["records"][0]) is FileSlice    # no connection
    assert pin_records(p1, Conn()) is p1 and pin_records(p2, Conn()) is p2
