"""workers/handlers/describe_configs.py: topic, broker and broker-logger resources, the
errors per resource, and v0's read-only rule for static broker entries."""
from __future__ import annotations

import logging
import types

from mpbroker.config import BrokerConfig
from mpbroker.protocol.errors import ErrorCode
from workers.handlers import describe_configs as dc

NS = types.SimpleNamespace


def make_broker(tmp_path):
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "broker.id": "1"}, cpu_count=1)
    return NS(broker_id=1, config=cfg, controller=NS(broker_config=lambda: cfg),
              metadata=NS(topics={"t": NS(configs={"retention.ms": "1000"})}))


def entries(resp, i=0):
    return {e["name"]: e for e in resp["results"][i]["configs"]}


def test_topic_configs_are_its_overrides_over_the_broker_defaults(tmp_path):
    b = make_broker(tmp_path)
    code, msg, out = dc.describe_resource(b, dc.TOPIC, "t", {"retention.ms", "cleanup.policy"},
                                          False, False)
    got = {e["name"]: e["value"] for e in out}
    assert code == 0 and msg is None and got == {"retention.ms": "1000", "cleanup.policy": "delete"}
    code, msg, out = dc.describe_resource(b, dc.TOPIC, "nope", None, False, False)
    assert (code, msg, out) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Topic nope does not exist", [])


def test_broker_resources_answer_for_this_broker_or_the_cluster_default_only(tmp_path):
    b = make_broker(tmp_path)
    assert dc.describe_resource(b, dc.BROKER, "1", {"num.partitions"}, False, False)[0] == 0
    assert dc.describe_resource(b, dc.BROKER, "", {"num.partitions"}, False, False)[0] == 0
    code, msg, _ = dc.describe_resource(b, dc.BROKER, "2", None, False, False)
    assert (code, msg) == (ErrorCode.INVALID_REQUEST, "Unexpected broker id 2")
    assert dc.describe_resource(b, 99, "x", None, False, False)[:2] == (
        ErrorCode.INVALID_REQUEST, "Unsupported resource type 99")


def test_broker_logger_lists_effective_levels(tmp_path):
    b = make_broker(tmp_path)
    logging.getLogger("mpbroker.test_describe_configs").setLevel(logging.DEBUG)
    code, _, out = dc.describe_resource(b, dc.BROKER_LOGGER, "1",
                                        {"root", "mpbroker.test_describe_configs"}, False, False)
    levels = {e["name"]: e["value"] for e in out}
    assert code == 0 and levels["mpbroker.test_describe_configs"] == "DEBUG"
    assert set(levels) == {"root", "mpbroker.test_describe_configs"}
    assert dc.describe_resource(b, dc.BROKER_LOGGER, "", None, False, False)[0] == \
        ErrorCode.INVALID_REQUEST


def test_v0_marks_static_broker_entries_read_only(tmp_path):
    # v0 has no config sources: a key set in server.properties (STATIC_BROKER_CONFIG, 4)
    # cannot be changed there, so v0 says read-only even for a dynamically updatable key
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "broker.id": "1", "log.cleaner.threads": "2"},
                       cpu_count=1)
    b = make_broker(tmp_path)
    b.controller = NS(broker_config=lambda: cfg)
    req = {"resources": [{"resource_type": dc.BROKER, "resource_name": "1",
                          "configuration_keys": ["log.cleaner.threads"]}]}
    v0 = entries(dc.handle(b, NS(api_version=0), req))["log.cleaner.threads"]
    v1 = entries(dc.handle(b, NS(api_version=1), req))["log.cleaner.threads"]
    assert v0["config_source"] == v1["config_source"] == 4
    assert v0["read_only"] is True and v1["read_only"] is False
