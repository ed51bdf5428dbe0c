"""mpbroker/controller/client_quotas.py through the EmbeddedController: AlterClientQuotas
validated per entry, validate_only, persisted in the embedded store across a restart,
pushed to the workers; a per-entity controller_mutation_rate overrides the broker's."""
import asyncio

from mpbroker.metadata import model
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security import quotas as q
from tests.mpbroker.controller.embedded_harness import Worker, make


def test_alter_validates_each_entry_and_persists(tmp_path):
    ctl = make(tmp_path)
    w = Worker()
    ctl.attach_worker(w)
    entries = [([("client-id", "app")], [(q.PRODUCER_BYTE_RATE, 1024.0, False)]),
               ([("user", None)], [(q.CONSUMER_BYTE_RATE, 2048.0, False)]),
               ([("ip", "1.2.3.4")], [(q.PRODUCER_BYTE_RATE, 1.0, False)]),
               ([("user", "x")], [("no_such_key", 1.0, False)])]
    res = asyncio.run(ctl.alter_client_quotas(entries, False))
    assert [code for _, code, _ in res] == [0, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert res[3][2] == "Invalid configuration key no_such_key"
    expected = {(("client-id", "app"),): {q.PRODUCER_BYTE_RATE: 1024.0},
                (("user", None),): {q.CONSUMER_BYTE_RATE: 2048.0}}
    assert ctl.md.client_quotas == expected and w.md.client_quotas == expected
    again = make(tmp_path)                       # a restart reads the store
    assert again.md.client_quotas == expected


def test_validate_only_changes_nothing(tmp_path):
    ctl = make(tmp_path)
    epoch = ctl.md.epoch
    res = asyncio.run(ctl.alter_client_quotas(
        [([("client-id", None)], [(q.REQUEST_PERCENTAGE, 50.0, False)])], True))
    assert res[0][1] == 0 and ctl.md.client_quotas == {} and ctl.md.epoch == epoch


def test_metadata_round_trips_through_its_json_form():
    md = model.set_client_quotas(model.new_cluster_metadata("c"),
                                 {(("client-id", None), ("user", "u")): {"producer_byte_rate": 5.0}})
    assert model.from_dict(model.to_dict(md)).client_quotas == md.client_quotas
    old = model.to_dict(model.new_cluster_metadata("c"))
    del old["client_quotas"]                     # a store written before quotas existed
    assert model.from_dict(old).client_quotas == {}


def test_entity_controller_mutation_rate_overrides_the_broker_default(tmp_path):
    ctl = make(tmp_path)
    asyncio.run(ctl.alter_client_quotas(
        [([("client-id", "slow")], [(q.CONTROLLER_MUTATION_RATE, 1.0, False)])], False))
    spec = lambda name, n: {"name": name, "num_partitions": n, "replication_factor": 1,  # noqa: E731
                            "assignments": {}, "configs": []}
    # burst of 1/s * 11 windows: 12 partitions drive the bucket into debt, then refused
    res = asyncio.run(ctl.create_topics([spec("a", 12), spec("b", 1)], False, 0, ("slow", True)))
    assert [r["error_code"] for r in res] == [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
    assert res.throttle_time_ms > 0
    res = asyncio.run(ctl.create_topics([spec("c", 30)], False, 0, ("fast", True)))
    assert res[0]["error_code"] == 0 and res.throttle_time_ms == 0
