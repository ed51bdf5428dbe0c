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
`join` merges several answers, now or later, the same way: one future, completed by
the answers' done callbacks (the router's parts of a request split across workers).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Callable

_Future = asyncio.Future


def later(answer) -> bool:
    """The answer comes later (it is an awaitable)."""
    if answer is None or answer.__class__ is dict:    # the common answers, checked cheaply
        return False
    # a future (what a parked operation or a forwarded part answers) without
    # isawaitable's abstract-class check
    return isinstance(answer, _Future) or inspect.isawaitable(answer)


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


def join(answers: list, merge: Callable, recover: Callable | None = None) -> asyncio.Future:
    """A future of `merge(values)`, the values of `answers` (each now or later) in
    their order, completed by the answers' own done callbacks: no task runs it. An
    answer that fails is given to `recover(i, exc)`, which returns the answer to wait
    for instead (now or later) or raises; the join then fails with what it raised
    (without `recover`, with the failure itself), as does a failing `merge`. A
    cancelled answer cancels the join. Once the join has merged or failed, the answers
    still to come are only looked at (a failure is not left unretrieved) and it keeps
    nothing of the request; a join its waiter cancelled (nothing in the request path
    does) lets go of it at the next answer."""
    return _Join(answers, merge, recover).fut


class _Join:
    __slots__ = ("fut", "out", "left", "merge", "recover")

    def __init__(self, answers: list, merge: Callable, recover: Callable | None):
        self.fut = asyncio.get_running_loop().create_future()
        self.out = list(answers)
        self.merge, self.recover = merge, recover
        self.left = 0
        for i, answer in enumerate(answers):
            if later(answer):
                self.left += 1
                self._wait(i, answer)
        if not self.left:
            self._finish()

    def _wait(self, i: int, answer) -> None:
        if not isinstance(answer, _Future):
            answer = asyncio.ensure_future(answer)
        answer.add_done_callback(functools.partial(self._done, i))

    def _done(self, i: int, f: asyncio.Future) -> None:
        fut = self.fut
        if fut.done():
            if not f.cancelled():
                f.exception()       # retrieved: a part that fails after the join did
            self._drop()            # (cancelled by its waiter meanwhile)
            return
        if f.cancelled():
            self._drop()
            fut.cancel()
            return
        exc = f.exception()
        if exc is None:
            self.out[i] = f.result()
        else:
            try:
                if self.recover is None:
                    raise exc
                answer = self.recover(i, exc)
            except asyncio.CancelledError:
                self._drop()
                fut.cancel()
                return
            except Exception as e:          # the join's waiter gets it
                self._drop()
                fut.set_exception(e)
                return
            if later(answer):
                self._wait(i, answer)
                return
            self.out[i] = answer
        self.left -= 1
        if not self.left:
            self._finish()

    def _finish(self) -> None:
        try:
            self.fut.set_result(self.merge(self.out))
        except Exception as e:
            self.fut.set_exception(e)
        self._drop()

    def _drop(self) -> None:
        """Nothing of the request is kept once the join is done (answers still to come
        hold this object until they do)."""
        self.out = self.merge = self.recover = None
