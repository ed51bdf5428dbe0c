"""A failing handler is answered with its API's error response, for every API served.

Every API key and version of the registry (`workers.handlers.HANDLERS`) with a handler
that raises, synchronously and from its awaitable: the dispatcher's answer is a framed
response with the request's correlation id that decodes with the codec and carries the
failure's code in its error fields (the codes chosen per failure:
test_handler_errors.py). Then acks=0 Produce (closes instead of answering), a body that
does not encode, and a real Connection over a socket pair answering requests pipelined
behind a failure in order.
"""
from __future__ import annotations

import asyncio
import errno
import socket
import struct

import pytest

from mpbroker.protocol import api_keys as K
from mpbroker.protocol import codec
from mpbroker.protocol.errors import ErrorCode as E
from tests.mpbroker.protocol.test_error_response import Sample, _walk
from workers import dispatch as D
from workers.answers import EncodedLater
from workers import handler_errors as HE
from workers.handlers import HANDLERS, Handler


class FakeBroker:
    router = None
    requests_total = 0

    def __init__(self):
        self.clients = set()


class Ctx:
    def __init__(self, api_key, version, correlation_id=7):
        self.api_key, self.api_version, self.correlation_id = api_key, version, correlation_id
        self.client_id, self.client_host, self.connection = "t", "127.0.0.1", None


def _frame(api_key, version, body):
    return memoryview(codec.encode_request(api_key, version, body))


def _response(api_key, version, chunks):
    data = b"".join(bytes(c) for c in chunks)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    (cid,) = struct.unpack_from(">i", data, 4)
    pos = 8
    if api_key != K.API_VERSIONS and codec.RESPONSES[api_key].is_flexible(version):
        pos += 1          # empty tagged fields of header v1
    return cid, codec.decode_response(api_key, version, memoryview(data), pos)


def _cases():
    for key in sorted(HANDLERS):
        h = HANDLERS[key]
        for v in range(h.min_version, h.max_version + 1):
            yield key, v


# Responses whose version has no error field that an error answer can fill: DescribeLogDirs
# v0-2 has error codes only per log dir, and its request names no log dir, so Kafka's
# getErrorResponse answers an empty result list there (the top-level ErrorCode is v3+).
NO_ERROR_FIELD = {(K.DESCRIBE_LOG_DIRS, v) for v in (0, 1, 2)}


def _check(api_key, version, chunks, code):
    cid, resp = _response(api_key, version, chunks)
    assert cid == 7
    errors = list(_walk(codec.RESPONSES[api_key].fields, version, resp, "", []))
    if (api_key, version) in NO_ERROR_FIELD:
        assert not errors and resp.get("results") == [], (api_key, version, resp)
        return
    assert errors, f"{K.NAMES[api_key]} v{version}: no error field answered"
    assert all(value == code for _, _, value in errors), (api_key, version, resp)


@pytest.fixture
def failing(monkeypatch):
    def install(api_key, handle):
        h = HANDLERS[api_key]
        monkeypatch.setitem(HANDLERS, api_key, Handler(handle, h.min_version, h.max_version))
    return install


def _request(api_key, version):
    body = Sample().struct(codec.REQUESTS[api_key].fields, version)
    if api_key == K.PRODUCE:
        body["acks"] = -1
    return body


@pytest.mark.parametrize("api_key,version", list(_cases()))
def test_every_registered_api_answers_a_raising_handler(api_key, version, failing):
    def boom(broker, ctx, req):
        raise OSError(errno.ENOSPC, "No space left on device")
    failing(api_key, boom)
    chunks = D.Dispatcher(FakeBroker()).dispatch(Ctx(api_key, version),
                                                 _frame(api_key, version, _request(api_key, version)), 0)
    code = HE.failure_code(OSError(errno.ENOSPC, "x"), api_key)
    _check(api_key, version, chunks, code)


@pytest.mark.parametrize("api_key", sorted(HANDLERS))
def test_every_registered_api_answers_a_failing_awaitable(api_key, failing):
    version = HANDLERS[api_key].max_version

    async def later():
        await asyncio.sleep(0)
        raise RuntimeError("a bug")

    failing(api_key, lambda broker, ctx, req: later())

    async def main():
        fut = D.Dispatcher(FakeBroker()).dispatch(
            Ctx(api_key, version), _frame(api_key, version, _request(api_key, version)), 0)
        return await fut
    chunks = asyncio.run(main())
    expect = E.COORDINATOR_NOT_AVAILABLE if api_key == K.FIND_COORDINATOR else E.UNKNOWN_SERVER_ERROR
    _check(api_key, version, chunks, expect)


def test_an_answer_that_comes_later_is_encoded_when_its_future_is_done(failing):
    """A handler's future comes back as an EncodedLater of that very future (no task):
    its `finish` encodes the answer, or the API's error for a failed future."""
    version = HANDLERS[K.DELETE_TOPICS].max_version
    futures = []

    def handle(broker, ctx, req):
        futures.append(asyncio.get_running_loop().create_future())
        return futures[-1]
    failing(K.DELETE_TOPICS, handle)
    frame = _frame(K.DELETE_TOPICS, version, _request(K.DELETE_TOPICS, version))

    async def main():
        d = D.Dispatcher(FakeBroker())
        ok = d.dispatch(Ctx(K.DELETE_TOPICS, version), frame, 0)
        assert type(ok) is EncodedLater and ok.fut is futures[0]
        futures[0].set_result({"throttle_time_ms": 0, "responses": []})
        cid, resp = _response(K.DELETE_TOPICS, version, ok.finish(ok.fut))
        assert cid == 7 and resp["responses"] == []
        failed = d.dispatch(Ctx(K.DELETE_TOPICS, version), frame, 0)
        futures[1].set_exception(RuntimeError("a bug"))
        return failed.finish(failed.fut)
    _check(K.DELETE_TOPICS, version, asyncio.run(main()), E.UNKNOWN_SERVER_ERROR)


def test_with_a_router_a_request_run_here_whole_is_guarded_by_the_dispatcher(failing):
    """With several workers the router hands back what the handler answered for a
    request that runs here whole (workers/router.py `route`): a future stays that very
    future (no task), and a failure, now or later, is answered as with one worker."""
    class Router:
        active = True

        def route(self, ctx, req, handle, scope):
            return handle(None, ctx, req)
    version = HANDLERS[K.PRODUCE].max_version
    frame = _frame(K.PRODUCE, version, _request(K.PRODUCE, version))
    broker = FakeBroker()
    broker.router = Router()
    futures = []

    def handle(broker, ctx, req):
        futures.append(asyncio.get_running_loop().create_future())
        return futures[-1]

    async def main():
        failing(K.PRODUCE, handle)
        d = D.Dispatcher(broker)
        later = d.dispatch(Ctx(K.PRODUCE, version), frame, 0)
        assert type(later) is EncodedLater and later.fut is futures[0]
        futures[0].set_exception(RuntimeError("a bug"))
        _check(K.PRODUCE, version, later.finish(later.fut), E.UNKNOWN_SERVER_ERROR)

        def boom(broker, ctx, req):
            raise OSError(errno.ENOSPC, "No space left on device")
        failing(K.PRODUCE, boom)
        return d.dispatch(Ctx(K.PRODUCE, version), frame, 0)
    _check(K.PRODUCE, version, asyncio.run(main()),
           HE.failure_code(OSError(errno.ENOSPC, "x"), K.PRODUCE))


def test_one_warning_per_failure_and_info_when_the_controller_logged_it(failing, caplog):
    def boom(broker, ctx, req):
        raise OSError(errno.ENOSPC, "No space left on device")
    failing(K.DELETE_TOPICS, boom)
    caplog.set_level("INFO", logger="workers.handlers")
    D.Dispatcher(FakeBroker()).dispatch(Ctx(K.DELETE_TOPICS, 4), _frame(
        K.DELETE_TOPICS, 4, {"topic_names": ["a"], "timeout_ms": 1}), 0)
    recs = [r for r in caplog.records if r.name == "workers.handlers"]
    assert [r.levelname for r in recs] == ["WARNING"]
    assert "DeleteTopics v4" in recs[0].getMessage() and "KAFKA_STORAGE_ERROR" in recs[0].getMessage()
    caplog.clear()

    def remote(broker, ctx, req):
        e = OSError(errno.ENOSPC, "No space left on device")
        e.mpbroker_logged_elsewhere = True
        raise e
    failing(K.DELETE_TOPICS, remote)
    D.Dispatcher(FakeBroker()).dispatch(Ctx(K.DELETE_TOPICS, 4), _frame(
        K.DELETE_TOPICS, 4, {"topic_names": ["a"], "timeout_ms": 1}), 0)
    assert [r.levelname for r in caplog.records if r.name == "workers.handlers"] == ["INFO"]


def test_acks0_produce_failure_closes_instead_of_answering(failing):
    def boom(broker, ctx, req):
        raise OSError(errno.EIO, "I/O error")
    failing(K.PRODUCE, boom)
    body = {"acks": 0, "timeout_ms": 1, "transactional_id": None,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}]}
    with pytest.raises(ConnectionAbortedError):
        D.Dispatcher(FakeBroker()).dispatch(Ctx(K.PRODUCE, 9), _frame(K.PRODUCE, 9, body), 0)


def test_a_body_that_does_not_encode_is_answered_with_the_error(failing):
    failing(K.DELETE_TOPICS, lambda b, c, r: {"responses": [{"name": 5, "error_code": "x"}]})
    chunks = D.Dispatcher(FakeBroker()).dispatch(Ctx(K.DELETE_TOPICS, 4), _frame(
        K.DELETE_TOPICS, 4, {"topic_names": ["a", "b"], "timeout_ms": 1}), 0)
    _, resp = _response(K.DELETE_TOPICS, 4, chunks)
    assert [(r["name"], r["error_code"]) for r in resp["responses"]] == \
        [("a", E.UNKNOWN_SERVER_ERROR), ("b", E.UNKNOWN_SERVER_ERROR)]


def _request_frame(api_key, version, cid, body):
    hv = 2 if codec.REQUESTS[api_key].is_flexible(version) else 1
    header = struct.pack(">hhi", api_key, version, cid) + struct.pack(">h", 1) + b"t"
    if hv == 2:
        header += b"\x00"
    payload = header + codec.encode_request(api_key, version, body)
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock):
    def exact(n):
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out
    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def test_connection_answers_pipelined_requests_in_order_after_a_failure(failing):
    """CreateTopics fails (async, like a controller RPC on a full disk), DeleteTopics
    behind it fails at once, then a Heartbeat that works: three answers, in order, on a
    connection that stays open."""
    from workers.connection import Connection

    async def fails_later(broker, ctx, req):
        await asyncio.sleep(0.05)       # the scenario: it fails after the ones behind it
        raise OSError(errno.ENOSPC, "No space left on device")

    def fails_now(broker, ctx, req):
        raise OSError(errno.EROFS, "Read-only file system")
    failing(K.CREATE_TOPICS, fails_later)
    failing(K.DELETE_TOPICS, fails_now)
    failing(K.HEARTBEAT, lambda b, c, r: {"throttle_time_ms": 0, "error_code": 0})

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        conn = Connection(a, D.Dispatcher(FakeBroker()), max_request_bytes=1 << 20)
        task = asyncio.ensure_future(conn.serve())
        create = {"topics": [{"name": "t1", "num_partitions": 1, "replication_factor": 1,
                              "assignments": [], "configs": []}], "timeout_ms": 1000,
                  "validate_only": False}
        b.sendall(_request_frame(K.CREATE_TOPICS, 7, 1, create)
                  + _request_frame(K.DELETE_TOPICS, 4, 2, {"topic_names": ["t2"], "timeout_ms": 1})
                  + _request_frame(K.HEARTBEAT, 4, 3, {"group_id": "g", "generation_id": 1,
                                                       "member_id": "m",
                                                       "group_instance_id": None}))
        b.settimeout(10)
        frames = [await asyncio.get_running_loop().run_in_executor(None, _read_frame, b)
                  for _ in range(3)]
        assert not conn.closed
        b.close()
        await asyncio.wait_for(task, 10)
        return frames

    f1, f2, f3 = asyncio.run(main())
    assert struct.unpack_from(">i", f1)[0] == 1
    created = codec.decode_response(K.CREATE_TOPICS, 7, memoryview(f1), 5)
    assert [(t["name"], t["error_code"]) for t in created["topics"]] == [("t1", E.KAFKA_STORAGE_ERROR)]
    assert struct.unpack_from(">i", f2)[0] == 2
    deleted = codec.decode_response(K.DELETE_TOPICS, 4, memoryview(f2), 5)
    assert [(t["name"], t["error_code"]) for t in deleted["responses"]] == \
        [("t2", E.KAFKA_STORAGE_ERROR)]
    assert struct.unpack_from(">i", f3)[0] == 3
    assert codec.decode_response(K.HEARTBEAT, 4, memoryview(f3), 5)["error_code"] == 0
