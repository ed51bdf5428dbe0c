"""workers/answers.py: the one rule for a handler's answer, now or later."""
import asyncio
import gc
import weakref

from workers.answers import join, later, settle


def test_later_is_an_awaitable_now_is_a_value():
    async def run():
        fut = asyncio.get_running_loop().create_future()
        coro = asyncio.sleep(0)
        assert later(fut) and later(coro)
        assert not later({"error_code": 0}) and not later(None)
        await coro
        fut.set_result({"a": 1})
        return await settle(fut), await settle({"b": 2}), await settle(None)
    assert asyncio.run(run()) == ({"a": 1}, {"b": 2}, None)


def test_later_on_values_other_than_a_plain_dict():
    class Body(dict):
        pass

    class Awaitable:
        def __await__(self):
            return iter(())
    assert not later(Body()) and not later([]) and not later(0) and later(Awaitable())


# ---- join: several answers, now or later, merged by their callbacks
def _loop_run(coro_fn):
    return asyncio.run(coro_fn())


def test_join_merges_answers_now_and_later_in_their_order():
    async def run():
        loop = asyncio.get_running_loop()
        a, b = loop.create_future(), loop.create_future()

        async def coro():
            return "c"
        fut = join(["now", a, coro(), b], list)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        b.set_result("b")
        await asyncio.sleep(0)
        assert not fut.done()           # a is still to come
        a.set_result("a")
        return await fut
    assert _loop_run(run) == ["now", "a", "c", "b"]


def test_join_of_answers_all_now_is_done_at_once():
    async def run():
        fut = join([1, 2], sum)
        assert fut.done()
        return fut.result()
    assert _loop_run(run) == 3


def test_a_failed_answer_is_recovered_by_a_replacement_now_or_later():
    class Gone(Exception):
        pass

    async def run():
        loop = asyncio.get_running_loop()
        a, b, again = loop.create_future(), loop.create_future(), loop.create_future()
        seen = []

        def recover(i, exc):
            seen.append((i, type(exc)))
            return "here" if i == 0 else again
        fut = join([a, b], list, recover)
        a.set_exception(Gone())
        b.set_exception(Gone())
        await asyncio.sleep(0)
        assert not fut.done()           # b's replacement comes later
        again.set_result("later here")
        return await fut, seen
    assert _loop_run(run) == (["here", "later here"], [(0, Gone), (1, Gone)])


def test_a_failure_not_recovered_fails_the_join_and_later_answers_are_ignored():
    """After the join failed, a later answer or failure of another part completes
    nothing (no InvalidStateError in a callback) and a failure is retrieved (asyncio
    would log it as never retrieved); the join keeps no reference to the request."""
    async def run():
        loop = asyncio.get_running_loop()
        errors = []
        loop.set_exception_handler(lambda loop, context: errors.append(context))
        a, b, c = loop.create_future(), loop.create_future(), loop.create_future()

        class Merge:            # holds the request, as the router's merge does
            def __call__(self, out):
                return out
        merge = Merge()
        held = weakref.ref(merge)

        def recover(i, exc):
            raise exc
        fut = join([a, b, c], merge, recover)
        del merge
        a.set_exception(KeyError("bug"))
        await asyncio.sleep(0)
        assert isinstance(fut.exception(), KeyError)
        gc.collect()
        assert held() is None           # b and c still to come: the request let go
        b.set_result("b")
        c.set_exception(ConnectionError("the owner went too"))
        del c
        await asyncio.sleep(0)
        gc.collect()
        return errors
    assert _loop_run(run) == []


def test_a_failing_merge_fails_the_join_and_a_cancelled_join_ignores_the_rest():
    async def run():
        loop = asyncio.get_running_loop()
        a = loop.create_future()
        fut = join([a], lambda out: 1 / 0)
        a.set_result(1)
        await asyncio.sleep(0)
        assert isinstance(fut.exception(), ZeroDivisionError)
        b = loop.create_future()
        merged = []
        cancelled = join([b], merged.append)
        cancelled.cancel()              # the client went
        b.set_result("late")
        await asyncio.sleep(0)
        return merged, cancelled.cancelled()
    assert _loop_run(run) == ([], True)


def test_a_cancelled_answer_cancels_the_join():
    async def run():
        a = asyncio.get_running_loop().create_future()
        fut = join([a], list)
        a.cancel()
        await asyncio.sleep(0)
        return fut.cancelled()
    assert _loop_run(run)
