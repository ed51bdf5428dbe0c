"""Decode a request frame, run its handler, encode the response.

The registry of handlers, their version ranges and scopes is
`workers.handlers.HANDLERS`. A handler is `handle(broker, ctx, request_dict)` and
answers now or later (workers/answers.py): the response body dict, None when no
response is owed (Produce with acks=0), or an awaitable of either (delayed operations:
long-polling Fetch, acks=-1 Produce, JoinGroup). With several workers the request goes
through the router (workers/router.py) with its scope; the parts other workers forward
here run through `run_part`.

What closes the connection (as Kafka does): an API key we do not serve, a version outside
the advertised range (except ApiVersions, which gets the KIP-511 v0 answer), a body that
does not decode, a failed acks=0 Produce. Everything else is answered: a handler that
raises (or whose awaitable does), a router part that fails, a body that does not encode
get the API's error response (`workers/handler_errors.py`), in order with the requests
pipelined around it. Before a request runs or is routed, `workers/authz.py` checks it
against the ACLs (once, here on the front): refused whole, or with its denied items taken
out and answered with their authorization errors. With the router, each part is guarded on its own, so a failing
owner answers the error for its partitions only.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time

from mpbroker.protocol import api_keys, codec, framing
from workers.answers import EncodedLater, later
from workers.authz import front_check
from workers.handler_errors import answer_failure, run_guarded
from workers.handlers import HANDLERS
from workers import quotas

log = logging.getLogger(__name__)


class UnsupportedRequest(Exception):
    pass


class Dispatcher:
    def __init__(self, broker):
        self.broker = broker

    def dispatch(self, ctx, frame: memoryview, pos: int):
        """Returns encoded chunks, an EncodedLater of them (or of None), or None."""
        api_key, version = ctx.api_key, ctx.api_version
        entry = HANDLERS.get(api_key)
        if entry is None:
            raise UnsupportedRequest(f"unknown api key {api_key}")
        if not entry.min_version <= version <= entry.max_version:
            if api_key == api_keys.API_VERSIONS:
                return self._api_versions_fallback(ctx)
            raise UnsupportedRequest(f"unsupported version {version} of api {api_key}")
        started = time.perf_counter()      # request_percentage quota (workers/quotas.py)
        request = codec.decode_request(api_key, version, frame, pos)
        broker = self.broker
        if api_key == api_keys.FETCH:
            quotas.before_fetch(broker, ctx, request)
        broker.requests_total += 1
        conn = ctx.connection
        if conn is not None and "client_id" not in conn.__dict__:
            conn.client_id = ctx.client_id        # for `mpbroker placement show`
            broker.clients.add(conn)
        finish = None
        verdict = front_check(broker, ctx, request)     # authorization (workers/authz.py)
        if verdict is not None:
            if verdict.refused:
                return None if verdict.answer is None else self._encode(ctx, request, verdict.answer)
            request, finish = verdict.request, verdict.finish
        router = broker.router
        if router is not None and router.active:
            # the router places the request by its scope (workers/router.py) and
            # guards each part; the routing, and a request that runs here whole, are
            # guarded here, and an answer later by _finish
            handle, scope = entry.handle, entry.scope
            result = run_guarded(lambda b, c, r: router.route(c, r, handle, scope),
                                 broker, ctx, request, guard_awaitable=False)
        else:
            # an answer later is finished by _finish, which answers its failure alike
            result = run_guarded(entry.handle, broker, ctx, request, guard_awaitable=False)
        throttle_ms = quotas.on_request(broker, ctx, len(frame), time.perf_counter() - started)
        if throttle_ms and (result is None or quotas.client_throttles(api_key, version)):
            # muted now, not when the answer is ready (a Produce waits for its append):
            # the requests the client pipelined behind it are not read meanwhile
            quotas.mute(ctx, throttle_ms)
        if result is None:
            return None
        if later(result):
            fut = result if isinstance(result, asyncio.Future) else asyncio.ensure_future(result)
            return EncodedLater(fut, functools.partial(self._finish, ctx, request, finish,
                                                       throttle_ms))
        if finish is not None:          # the authorization's filtering of the answer
            result = finish(result)
        delay_ms = quotas.on_response(broker, ctx, request, result, throttle_ms)
        if delay_ms:
            return asyncio.ensure_future(self._delayed(ctx, request, result, delay_ms))
        return self._encode(ctx, request, result)

    def run_part(self, ctx, body: dict):
        """A part another worker forwarded (workers/router.py, owner side): its
        handler's answer, now or later, failures answered as the API's error response."""
        return run_guarded(HANDLERS[ctx.api_key].handle, self.broker, ctx, body)

    def _finish(self, ctx, request, finish, throttle_ms: int, fut: asyncio.Future):
        """The encoded answer of a handler's completed future (EncodedLater.finish)."""
        try:
            body = fut.result()
        except (asyncio.CancelledError, ConnectionAbortedError):
            raise
        except Exception as e:      # the handler's failure, as run_guarded answers it
            body = answer_failure(ctx, request, e)
        if body is None:
            return None
        if finish is not None:
            body = finish(body)
        delay_ms = quotas.on_response(self.broker, ctx, request, body, throttle_ms)
        if delay_ms:        # a version before KIP-219: answered after the throttle time
            return asyncio.ensure_future(self._delayed(ctx, request, body, delay_ms))
        return self._encode(ctx, request, body)

    async def _delayed(self, ctx, request, body: dict, delay_ms: int):
        await asyncio.sleep(delay_ms / 1000)
        return self._encode(ctx, request, body)

    def _encode(self, ctx, request, body: dict) -> list:
        try:
            chunks = codec.encode_response(ctx.api_key, ctx.api_version, body)
        except Exception as e:      # a handler answered a body that does not fit the schema
            chunks = codec.encode_response(ctx.api_key, ctx.api_version,
                                           answer_failure(ctx, request, e))
        return framing.frame_response(ctx.api_key, ctx.api_version, ctx.correlation_id, chunks)

    def _api_versions_fallback(self, ctx) -> list:
        """KIP-511: an ApiVersions version we do not know gets a v0 answer carrying
        UNSUPPORTED_VERSION and only our ApiVersions range (as Kafka's
        ApiVersionsRequest.getErrorResponse), so the client retries with a version in it."""
        entry = HANDLERS[api_keys.API_VERSIONS]
        return framing.api_versions_fallback(ctx.correlation_id,
                                             (entry.min_version, entry.max_version))
