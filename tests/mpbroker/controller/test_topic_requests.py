"""CreateTopics / DeleteTopics pieces both controllers share (pure)."""
import pytest

from mpbroker import config as configmod
from mpbroker.controller import topic_requests
from mpbroker.metadata import model
from mpbroker.metadata.model import MetadataError
from mpbroker.protocol.errors import ErrorCode


def cfg(**kw):
    props = {"broker.id": "1", "log.dirs": "/tmp/unused", "listeners": "PLAINTEXT://127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in kw.items()})
    return configmod.BrokerConfig(props)


def spec(name, n=1, assignments=None, configs=()):
    return {"name": name, "num_partitions": n, "replication_factor": 1,
            "assignments": assignments, "configs": list(configs)}


def test_internal_topic_specs_follow_the_broker_keys():
    c = cfg(offsets_topic_num_partitions=7, transaction_state_log_num_partitions=3,
            transaction_state_log_min_isr=1)
    n, rf, configs = topic_requests.internal_topic_spec(c, model.OFFSETS_TOPIC)
    assert (n, configs["cleanup.policy"], configs["compression.type"]) == (7, "compact", "producer")
    n, rf, configs = topic_requests.internal_topic_spec(c, model.TRANSACTION_STATE_TOPIC)
    assert (n, configs["min.insync.replicas"]) == (3, "1")


def test_oversized_request_refused_whole():
    c = cfg(num_partitions=5000)
    assert topic_requests.refuse_oversized([spec("a", 10)], c) is None
    out = topic_requests.refuse_oversized([spec("a", -1), spec("b", -1)], c)    # 2 x the default
    assert [r["error_code"] for r in out] == [ErrorCode.POLICY_VIOLATION] * 2
    assert out[0]["error_message"] == model.EXCESSIVE_PARTITIONS_MESSAGE


def test_create_spec_checks():
    with pytest.raises(MetadataError) as e:
        topic_requests.check_create_spec(spec(model.OFFSETS_TOPIC))
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(MetadataError) as e:
        topic_requests.check_create_spec(spec("t", configs=[("retention.ms", None)]))
    assert e.value.code == ErrorCode.INVALID_CONFIG
    assert topic_requests.check_create_spec(spec("t", configs=[("retention.ms", "1")])) == {"retention.ms": "1"}


def test_delete_targets():
    md = model.create_topic(model.register_broker(model.new_cluster_metadata(),
                                                  model.Broker(1, "h", 1)), "t", 1, 1, None, {})
    tid = md.topics["t"].topic_id
    res = topic_requests.delete_result(None, tid)
    assert topic_requests.delete_target(md, res, None, tid).name == "t" and res["name"] == "t"
    with pytest.raises(MetadataError) as e:
        topic_requests.delete_target(md, topic_requests.delete_result("t", tid), "t", tid)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert [r["error_code"] for r in topic_requests.deletion_disabled([("t", None)])] == \
        [ErrorCode.TOPIC_DELETION_DISABLED]


def test_created_configs_are_shared_between_topics_created_alike():
    c = cfg()
    md = model.register_broker(model.new_cluster_metadata(), model.Broker(1, "h", 1))
    md = model.create_topic(md, "a", 1, 1, None, {})
    md = model.create_topic(md, "b", 1, 1, None, {})
    cc = topic_requests.CreatedConfigs()
    ra, rb = topic_requests.create_result("a"), topic_requests.create_result("b")
    cc.fill(ra, md.topics["a"], c)
    cc.fill(rb, md.topics["b"], c)
    assert ra["configs"] is rb["configs"] and ra["num_partitions"] == 1
