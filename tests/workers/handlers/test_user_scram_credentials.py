"""Describe/AlterUserScramCredentials handlers (workers/handlers/user_scram_credentials.py):
the request's parts to the controller, its answers into the response."""
import asyncio
from types import SimpleNamespace

from workers.handlers.user_scram_credentials import handle_alter, handle_describe


class Controller:
    def __init__(self):
        self.calls = []

    async def describe_user_scram_credentials(self, users):
        self.calls.append(("describe", users))
        return [{"user": "a", "error_code": 0, "error_message": None, "credential_infos": []}]

    async def alter_user_scram_credentials(self, deletions, upsertions):
        self.calls.append(("alter", deletions, upsertions))
        return [("a", 0, None), ("b", 93, "Too few iterations")]


def test_describe_and_alter():
    ctl = Controller()
    broker = SimpleNamespace(controller=ctl)
    resp = asyncio.run(handle_describe(broker, None, {"users": None}))
    assert resp["error_code"] == 0 and resp["results"][0]["user"] == "a"
    asyncio.run(handle_describe(broker, None, {"users": [{"name": "a"}]}))
    resp = asyncio.run(handle_alter(broker, None, {
        "deletions": [{"name": "a", "mechanism": 1}],
        "upsertions": [{"name": "b", "mechanism": 2, "iterations": 1, "salt": memoryview(b"s"),
                        "salted_password": b"p"}]}))
    assert resp == {"throttle_time_ms": 0, "results": [
        {"user": "a", "error_code": 0, "error_message": None},
        {"user": "b", "error_code": 93, "error_message": "Too few iterations"}]}
    assert ctl.calls == [("describe", None), ("describe", ["a"]),
                         ("alter", [("a", 1)], [("b", 2, 1, b"s", b"p")])]
