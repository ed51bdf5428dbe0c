"""What a handler answers, and the one rule that tells its two forms apart.

A handler `handle(broker, ctx, request)` answers either now or later:

* now: the response body dict, or None when no response is owed (acks=0 Produce);
* later: an awaitable of one of those (a delayed operation's future: long-polling
  Fetch, acks=-1 Produce, JoinGroup; or a coroutine that awaits other workers).

Callers that can finish at once when the answer is ready (the dispatcher encodes it
without a task, the router merges parts synchronously) ask `later(answer)`; callers
that wait anyway `await settle(answer)`. Nothing else in the request path inspects
an answer's type. The same rule serves any value that may come now or later (the
transaction verifier's error codes for Produce).

What the dispatcher gives the connection for an answer that comes later is an
`EncodedLater`: the handler's future and the step that encodes its answer. The
connection runs that step in the future's done callback and sends the bytes there
(workers/connection.py), so an answer that comes later costs one callback, not a task
that wakes when the future completes and then wakes the connection's write loop.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Callable


def later(answer) -> bool:
    """The answer comes later (it is an awaitable)."""
    if answer is None or answer.__class__ is dict:    # the common answers, checked cheaply
        return False
    return inspect.isawaitable(answer)


async def settle(answer):
    """The answer's value, awaited when it comes later."""
    if inspect.isawaitable(answer):
        return await answer
    return answer


class EncodedLater:
    """An encoded response that comes later: `fut` (the handler's future, or a task
    running its coroutine) completes, then `finish(fut)` gives the chunks to send (a
    list), None (no response owed) or, for an answer held back by a quota, an
    awaitable of either; `finish` raises (CancelledError, ConnectionAbortedError) when
    the connection must close instead. Awaiting it waits for both steps (a TLS
    connection's write loop does so)."""

    __slots__ = ("fut", "finish")

    def __init__(self, fut: asyncio.Future, finish: Callable):
        self.fut = fut
        self.finish = finish

    def __await__(self):
        fut = self.fut
        if not fut.done():
            try:
                yield from fut.__await__()
            except asyncio.CancelledError:
                raise
            except Exception:
                pass            # `finish` answers the handler's failure
        out = self.finish(fut)
        if out is not None and type(out) is not list:
            out = yield from out.__await__()
        return out
