"""The worker mesh's channel end (workers/mesh.py) and the Produce records it carries
raw (workers/router.py's detach/attach); the framing itself is tested in
tests/mpbroker/test_ipc.py."""
from __future__ import annotations

import socket
import struct

import pytest

from mpbroker.ipc import decode, encode
from mpbroker.protocol import api_keys as K
from workers import mesh
from workers.mesh import PeerLink
from workers.payloads import attach_records, detach_records


def _body(encoded) -> memoryview:
    chunks, total = encoded
    data = b"".join(bytes(c) for c in chunks)
    assert total == len(data)
    (size,) = struct.unpack_from("<I", data)
    assert size == len(data) - 4
    return memoryview(data)[4:]


def test_a_peer_link_asks_for_large_buffers_and_closes_with_itself():
    a, b = socket.socketpair()
    closed = []
    link = PeerLink(b, lambda m: None, closed.append)
    assert b.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= min(
        mesh.SOCK_BUF, _max_rcvbuf())
    a.close()
    link.poll(1)
    assert closed == [link] and link.closed


def _max_rcvbuf() -> int:
    """The kernel's cap on SO_RCVBUF (the socket gets at most twice this)."""
    try:
        with open("/proc/sys/net/core/rmem_max") as f:
            return int(f.read())
    except OSError:
        return 0


def test_detach_and_attach_produce_records():
    recs = [memoryview(b"r3"), memoryview(b"r0")]
    body = {"acks": 1, "topic_data": [{"name": "a", "partition_data": [
        {"index": 3, "records": recs[0]}, {"index": 0, "records": recs[1]},
        {"index": 1, "records": None}]}]}
    sent, bufs = detach_records(K.PRODUCE, body)
    assert body["topic_data"][0]["partition_data"][0]["records"] is recs[0]   # untouched
    assert [p["records"] for p in sent["topic_data"][0]["partition_data"]] == [0, 1, None]
    assert bufs == recs
    got = decode(_body(encode({"body": sent}, bufs)))
    attach_records(got["body"], got["raw"])
    assert [None if p["records"] is None else bytes(p["records"])
            for p in got["body"]["topic_data"][0]["partition_data"]] == [b"r3", b"r0", None]
    with pytest.raises(ValueError):
        attach_records({"topic_data": [{"partition_data": [{"records": 5}]}]}, [])
    assert detach_records(K.FETCH, {"x": 1}) == ({"x": 1}, [])


def test_an_acks0_part_to_a_dead_owner_is_not_lost_in_the_batch():
    """acks=0 parts leave at once (not with the iteration's batch): a dead owner shows
    in `forward`, which answers None so that the front runs the part itself."""
    import asyncio
    import types

    from workers.router import Router

    async def run():
        loop = asyncio.get_running_loop()
        router = Router(types.SimpleNamespace(worker_id=0, partition=lambda t, i: None,
                                              fetch_purgatory=types.SimpleNamespace()))
        a, b = socket.socketpair()
        a.settimeout(5)                 # batched, the frame would not have left yet
        router.add_peer(1, b)
        assert router.links_changed == 1        # a link opened (fetch fan-outs split again)
        router.start(loop)
        class Conn:
            client_host = "c"
        conn = Conn()
        ctx = types.SimpleNamespace(api_key=K.PRODUCE, api_version=9, client_id="x",
                                    client_host="c", connection=conn)
        body = {"acks": 0, "topic_data": []}
        assert router.forward(1, ctx, body, oneway=True) is True     # the owner is there
        assert a.recv(1 << 16)                                       # and it got the frame
        a.close()                                                    # the owner dies
        assert router.forward(1, ctx, body, oneway=True) is None
        router.close()
    asyncio.run(run())
