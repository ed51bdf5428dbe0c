"""AlterConfigs operations over overrides and the dynamic broker layers."""
import pytest

from mpbroker import config as configmod
from mpbroker.controller import config_ops as ops
from mpbroker.metadata import store
from mpbroker.metadata.model import MetadataError
from mpbroker.protocol.errors import ErrorCode


def test_set_delete_and_non_incremental_replace():
    cur = {"a": "1", "b": "2"}
    assert ops.apply_ops(cur, [("a", ops.SET, "3"), ("b", ops.DELETE, None)], True) == {"a": "3"}
    assert ops.apply_ops(cur, [("c", ops.SET, "1")], False) == {"c": "1"}
    with pytest.raises(MetadataError) as e:
        ops.apply_ops(cur, [("a", ops.SET, None)], True)
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_append_and_subtract_on_list_keys_only():
    keys = configmod.TOPIC_CONFIGS
    new = ops.apply_ops({}, [("cleanup.policy", ops.APPEND, "compact")], True, keys,
                        lambda k: "delete")
    assert new == {"cleanup.policy": "delete,compact"}
    new = ops.apply_ops(new, [("cleanup.policy", ops.SUBTRACT, "delete")], True, keys)
    assert new == {"cleanup.policy": "compact"}
    with pytest.raises(MetadataError) as e:
        ops.apply_ops({}, [("retention.ms", ops.APPEND, "1")], True, keys)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(MetadataError) as e:
        ops.apply_ops({}, [("no.such.key", ops.APPEND, "1")], True, keys)
    assert e.value.code == ErrorCode.INVALID_CONFIG


def test_dynamic_layers_persist(tmp_path):
    cfg = configmod.BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path),
                                  "listeners": "PLAINTEXT://127.0.0.1:0"})
    (tmp_path / store.METADATA_DIR).mkdir()       # the metadata store makes it
    dyn = ops.DynamicBrokerConfigs(str(tmp_path))
    assert dyn.alter(cfg, 1, "", [("log.retention.ms", ops.SET, "1000")], True, False)
    assert dyn.over(cfg)["log.retention.ms"] == 1000
    assert ops.DynamicBrokerConfigs(str(tmp_path)).layers["default"] == {"log.retention.ms": "1000"}
    assert not dyn.alter(cfg, 1, "1", [("log.retention.ms", ops.SET, "5")], True, True)   # validate only
    with pytest.raises(MetadataError):
        dyn.alter(cfg, 1, "2", [("log.retention.ms", ops.SET, "5")], True, False)

