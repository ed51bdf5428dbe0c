"""workers/answers.py: the one rule for a handler's answer, now or later."""
import asyncio

from workers.answers import later, settle


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
