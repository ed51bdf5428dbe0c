"""The EmbeddedController's request limits (issue #15): KRaft's per-request bound, the
KIP-578 caps, the KIP-599 mutation quota (injected clock) and yielding to the loop."""
import asyncio

from mpbroker import config as configmod
from mpbroker.controller import config_ops, embedded, limits
from mpbroker.controller.embedded import EmbeddedController
from mpbroker.protocol.errors import ErrorCode


def make(tmp_path, **overrides):
    props = {"broker.id": "1", "log.dirs": str(tmp_path / "d"),
             "listeners": "PLAINTEXT://127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    ctl = EmbeddedController(configmod.BrokerConfig(props))
    ctl.register_broker(1, "127.0.0.1", 9092)
    return ctl


def spec(name, n=1):
    return {"name": name, "num_partitions": n, "replication_factor": 1, "assignments": {},
            "configs": []}


def run(coro):
    return asyncio.run(coro)


def test_more_than_9999_partitions_in_one_request_refuses_the_request(tmp_path):
    ctl = make(tmp_path)
    res = run(ctl.create_topics([spec("a", 5000), spec("b", 5000)], False, 0))
    assert [(r["name"], r["error_code"]) for r in res] == [("a", ErrorCode.POLICY_VIOLATION),
                                                           ("b", ErrorCode.POLICY_VIOLATION)]
    assert res[0]["error_message"] == "Excessively large number of partitions per request."
    res = run(ctl.create_topics([spec("huge", 1_000_000)], False, 0))
    assert res[0]["error_code"] == ErrorCode.POLICY_VIOLATION and "huge" not in ctl.md.topics


def test_max_broker_partitions_is_policy_violation_and_internal_topics_pass(tmp_path):
    ctl = make(tmp_path, max_broker_partitions=10)
    res = run(ctl.create_topics([spec("a", 6), spec("b", 5), spec("c", 4)], False, 0))
    assert [r["error_code"] for r in res] == [0, ErrorCode.POLICY_VIOLATION, 0]
    assert "max.broker.partitions" in res[1]["error_message"]
    res = run(ctl.create_partitions([{"name": "c", "count": 6, "assignments": None}], False, 0))
    assert res[0]["error_code"] == ErrorCode.POLICY_VIOLATION
    run(ctl.ensure_internal_topic("__consumer_offsets"))     # 50 partitions: not refused
    assert len(ctl.md.topics["__consumer_offsets"].partitions) == 50


def test_mutation_quota_strict_and_permissive(tmp_path, monkeypatch):
    now = [1_000_000]
    ctl = make(tmp_path, controller_mutation_rate=1, controller_quota_window_num=2,
               controller_quota_window_size_seconds=1)          # burst 2 partitions
    ctl.limits.quotas.clock = lambda: now[0]
    res = run(ctl.create_topics([spec("a", 3), spec("b", 1)], False, 0, ("app", True)))
    assert [r["error_code"] for r in res] == [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
    assert res[1]["error_message"] == "The throttling quota has been exceeded."
    assert res.throttle_time_ms == 1000 and "b" not in ctl.md.topics
    # validate_only is not counted; another client id has its own bucket
    assert run(ctl.create_topics([spec("v", 1)], True, 0, ("app", True))).throttle_time_ms == 0
    assert run(ctl.create_topics([spec("b", 1)], False, 0, ("other", True)))[0]["error_code"] == 0
    # strict deletes are refused while in debt; permissive (old versions) goes through
    res = run(ctl.delete_topics([("a", None)], 0, ("app", True)))
    assert res[0]["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED and "a" in ctl.md.topics
    res = run(ctl.delete_topics([("a", None)], 0, ("app", False)))
    assert res[0]["error_code"] == 0 and res.throttle_time_ms == 4000     # -4 tokens at 1/s
    now[0] += 4000
    res = run(ctl.create_partitions([{"name": "b", "count": 2, "assignments": None}], False, 0,
                                    ("app", True)))
    assert res[0]["error_code"] == 0 and res.throttle_time_ms == 0


def test_creation_yields_to_the_loop_so_heartbeats_run(tmp_path):
    ctl = make(tmp_path)
    ticks = []

    async def main():
        stop = False

        async def ticker():
            while not stop:
                ticks.append(1)
                await asyncio.sleep(0)
        t = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = len(ticks)
        res = await ctl.create_topics([spec(f"t{i}") for i in range(2000)], False, 0)
        during = len(ticks) - before
        stop = True
        await t
        return res, during
    res, during = run(main())
    assert all(r["error_code"] == 0 for r in res) and len(ctl.md.topics) == 2000
    assert during >= 2000 // embedded.YIELD_EVERY - 1


def test_mutations_do_not_interleave(tmp_path):
    ctl = make(tmp_path)

    async def main():
        big = asyncio.create_task(ctl.create_topics([spec(f"t{i}") for i in range(1000)], False, 0))
        await asyncio.sleep(0)           # the creation is under way (it yields)
        gone = await ctl.delete_topics([("t5", None)], 0)
        await big
        return gone
    gone = run(main())
    # the delete waited for the creation: it found t5 and the result has no t5
    assert gone[0]["error_code"] == 0 and "t5" not in ctl.md.topics and len(ctl.md.topics) == 999


def test_quota_and_caps_follow_dynamic_config(tmp_path):
    ctl = make(tmp_path)
    assert run(ctl.create_topics([spec("a", 50)], False, 0, ("app", True)))[0]["error_code"] == 0
    out = run(ctl.alter_configs([(config_ops.BROKER, "", [("controller.mutation.rate", config_ops.SET, "0.01"),
                                                        ("max.broker.partitions", config_ops.SET, "60")])],
                                True, False))
    assert out == [(config_ops.BROKER, "", 0, None)]
    res = run(ctl.create_topics([spec("b", 11)], False, 0, ("app", True)))
    assert res[0]["error_code"] == ErrorCode.POLICY_VIOLATION
    res = run(ctl.create_topics([spec("b", 1), spec("c", 1)], False, 0, ("app", True)))
    assert [r["error_code"] for r in res] == [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
    assert res.throttle_time_ms > 0


def test_file_descriptor_limit_lowers_the_broker_cap(tmp_path, monkeypatch):
    assert limits.fd_ceiling(2, soft_limit=20000)[0] == 2 * (20000 - 1024) // 6
    assert limits.fd_ceiling(1, soft_limit=100)[0] == 1          # never below one
    assert limits.fd_ceiling(4, soft_limit=limits.resource.RLIM_INFINITY) == (None, "")
    monkeypatch.setattr(limits, "fd_ceiling", lambda workers: (
        30, f"max.broker.partitions, lowered to what RLIMIT_NOFILE=1204 allows {workers} worker(s)"))
    ctl = make(tmp_path, num_workers=1)
    res = run(ctl.create_topics([spec("a", 20), spec("b", 20)], False, 0))
    assert [r["error_code"] for r in res] == [0, ErrorCode.POLICY_VIOLATION]
    assert "limit of 30 (max.broker.partitions, lowered to what RLIMIT_NOFILE=1204 allows 1 worker(s)" \
        in res[1]["error_message"]


def test_growth_on_a_full_disk_leaves_the_space_reserve_to_deletes(tmp_path, monkeypatch):
    """The space reserve (storage/space_reserve.py) is there so that DeleteTopics and a
    restart can write metadata on a full disk; a CreateTopics, an internal topic or a
    CreatePartitions must fail there (KAFKA_STORAGE_ERROR for the client) instead of
    spending it, else the delete that would free the disk finds no reserve left."""
    import errno
    import os
    from mpbroker.metadata import store as store_mod
    from storage import space_reserve

    ctl = make(tmp_path)
    run(ctl.create_topics([spec("old", 2)], False, 0))
    meta_dir = ctl.store.dir
    assert space_reserve.ensure(meta_dir)
    reserve = os.path.join(meta_dir, space_reserve.RESERVE_FILE)
    real_write = store_mod.atomic_write

    def full_unless_reserve_freed(path, data):      # the reserve is the only room left
        if os.path.exists(reserve):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, data)
    monkeypatch.setattr(store_mod, "atomic_write", full_unless_reserve_freed)
    monkeypatch.setattr(space_reserve, "ensure", lambda d, size=0: os.path.exists(reserve))

    for grow in (lambda: ctl.create_topics([spec("new", 1)], False, 0),
                 lambda: ctl.ensure_internal_topic("__consumer_offsets"),
                 lambda: ctl.create_partitions([{"name": "old", "count": 3,
                                                 "assignments": None}], False, 0)):
        try:
            run(grow())
        except OSError as e:
            assert e.errno == errno.ENOSPC
        assert os.path.exists(reserve)
    assert set(ctl.md.topics) == {"old"} and len(ctl.md.topics["old"].partitions) == 2
    res = run(ctl.delete_topics([("old", None)], 0))
    assert res[0]["error_code"] == 0 and "old" not in ctl.md.topics
    assert not os.path.exists(reserve)


def test_a_reloaded_static_layer_stays_under_the_dynamic_layers(tmp_path):
    ctl = make(tmp_path)
    out = run(ctl.alter_configs([(config_ops.BROKER, "", [("log.retention.ms", config_ops.SET, "1000")])],
                                True, False))
    assert out == [(config_ops.BROKER, "", 0, None)]
    ctl.reload(configmod.BrokerConfig({**ctl.cfg.static, "log.retention.ms": "5",
                                       "log.segment.bytes": "2000000"}))
    assert ctl.broker_config()["log.retention.ms"] == 1000          # the dynamic layer wins
    assert ctl.broker_config()["log.segment.bytes"] == 2000000      # the static layer changed
