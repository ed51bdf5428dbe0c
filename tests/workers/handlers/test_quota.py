"""workers/handlers/_quota.py: which versions are strict, and which are answered late."""
import asyncio

from mpbroker.metadata.quota import MutationResults
from mpbroker.protocol import api_keys as K
from workers.handlers import _quota


class Ctx:
    def __init__(self, api_key, api_version, client_id="app"):
        self.api_key, self.api_version, self.client_id = api_key, api_version, client_id


def test_strict_from_the_versions_that_know_throttling_quota_exceeded():
    assert _quota.quota_arg(Ctx(K.CREATE_TOPICS, 5)) == ("app", False)
    assert _quota.quota_arg(Ctx(K.CREATE_TOPICS, 6)) == ("app", True)
    assert _quota.quota_arg(Ctx(K.CREATE_PARTITIONS, 2))[1] is False
    assert _quota.quota_arg(Ctx(K.CREATE_PARTITIONS, 3))[1] is True
    assert _quota.quota_arg(Ctx(K.DELETE_TOPICS, 4))[1] is False
    assert _quota.quota_arg(Ctx(K.DELETE_TOPICS, 5))[1] is True
    assert _quota.quota_arg(Ctx(K.DELETE_TOPICS, 5, client_id=None))[0] == ""


def test_versions_before_kip_219_are_answered_after_the_throttle_time(monkeypatch):
    slept = []

    async def fake_sleep(s):
        slept.append(s)
    monkeypatch.setattr(_quota.asyncio, "sleep", fake_sleep)
    r = MutationResults([])
    r.throttle_time_ms = 1500
    assert asyncio.run(_quota.throttle(Ctx(K.CREATE_TOPICS, 2), r)) == 1500
    assert slept == [1.5]
    assert asyncio.run(_quota.throttle(Ctx(K.CREATE_TOPICS, 3), r)) == 1500   # client backs off
    assert asyncio.run(_quota.throttle(Ctx(K.DELETE_TOPICS, 1), r)) == 1500
    assert asyncio.run(_quota.throttle(Ctx(K.CREATE_PARTITIONS, 0), r)) == 1500
    r.throttle_time_ms = 10**7
    asyncio.run(_quota.throttle(Ctx(K.CREATE_PARTITIONS, 0), r))
    assert slept == [1.5, 1.5, 1.5, _quota.MAX_DELAY_MS / 1000]
    assert asyncio.run(_quota.throttle(Ctx(K.CREATE_TOPICS, 0), [])) == 0          # a plain list
