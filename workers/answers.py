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
"""
from __future__ import annotations

import inspect


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
