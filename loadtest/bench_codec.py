"""Micro-benchmark of the protocol codec (prints ops/s).

    python loadtest/bench_codec.py [seconds per case]

Cases: decode of a Produce v9 request carrying one 16 KiB batch; encode of a Fetch
v12 response with 10 partitions (records as FileSlices, the broker's path, and as
in-memory bytes); encode of a Fetch v16 response of 50 caught-up partitions (a
librdkafka consumer's long poll, answered) and of a Produce v10 response of one
partition; parse of a request header.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mpbroker.protocol import codec, framing  # noqa: E402
from storage.slices import FileSlice  # noqa: E402


def bench(name, fn, seconds):
    fn()
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(200):
            fn()
        n += 200
        now = time.perf_counter()
        if now >= deadline:
            break
    rate = n / (now - start)
    print(f"{name:58s} {rate:12,.0f} ops/s  {1e6 / rate:8.2f} us/op")
    return rate


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("seconds", nargs="?", type=float, default=1.0,
                    help="seconds per case (default 1)")
    seconds = ap.parse_args().seconds
    batch = os.urandom(16 * 1024)
    produce = codec.encode_request(0, 9, {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000,
        "topic_data": [{"name": "bench-topic", "partition_data": [{"index": 0, "records": batch}]}]})
    produce_view = memoryview(produce)
    bench("decode Produce v9 request (1 x 16 KiB batch)",
          lambda: codec.decode_request(0, 9, produce_view, 0), seconds)

    def fetch_body(records):
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{
            "topic": "bench-topic", "partitions": [{
                "partition_index": p, "error_code": 0, "high_watermark": 1000 + p,
                "last_stable_offset": 1000 + p, "log_start_offset": 0,
                "aborted_transactions": None, "preferred_read_replica": -1,
                "records": records(p)} for p in range(10)]}]}
    slices = fetch_body(lambda p: [FileSlice(f"/data/bench-topic-{p}/0.log", 0, 16384)])
    inline = fetch_body(lambda p: batch)
    bench("encode Fetch v12 response (10 partitions, FileSlice)",
          lambda: codec.encode_response(1, 12, slices), seconds)
    bench("encode Fetch v12 response (10 partitions, 16 KiB bytes)",
          lambda: codec.encode_response(1, 12, inline), seconds)
    bench("encode+frame Fetch v12 response (10 partitions, FileSlice)",
          lambda: framing.frame_response(1, 12, 1, codec.encode_response(1, 12, slices)), seconds)
    caught_up = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{
        "topic_id": b"\x01" * 16, "partitions": [{
            "partition_index": p, "error_code": 0, "high_watermark": 1000 + p,
            "last_stable_offset": 1000 + p, "log_start_offset": 0,
            "aborted_transactions": None, "preferred_read_replica": -1,
            "records": []} for p in range(50)]}]}
    bench("encode Fetch v16 response (50 partitions, caught up)",
          lambda: codec.encode_response(1, 16, caught_up), seconds)
    appended = {"throttle_time_ms": 0, "responses": [{"name": "bench-topic",
                "partition_responses": [{"index": 3, "error_code": 0, "base_offset": 1000,
                                         "log_append_time_ms": -1, "log_start_offset": 0,
                                         "record_errors": [], "error_message": None}]}]}
    bench("encode Produce v10 response (1 partition)",
          lambda: codec.encode_response(0, 10, appended), seconds)
    header = framing.frame_request(0, 9, 1, "bench-client", {})[4:]
    bench("parse_request_header (v2)", lambda: framing.parse_request_header(header), seconds)


if __name__ == "__main__":
    main()
