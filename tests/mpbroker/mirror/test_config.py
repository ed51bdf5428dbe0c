"""mm2.properties parsing: flows, per-flow and per-cluster overrides, defaults, warnings,
one-line errors."""
from __future__ import annotations

import pytest

from mpbroker.mirror.config import MirrorConfig, MirrorConfigError
from mpbroker.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

BASE = {"clusters": "A, B", "A.bootstrap.servers": "a:9092", "B.bootstrap.servers": "b:9092",
        "A->B.enabled": "true"}


def cfg(**extra) -> MirrorConfig:
    return MirrorConfig.from_props({**BASE, **extra})


def test_one_enabled_flow_with_mm2_defaults():
    c = cfg()
    assert [f.name for f in c.flows] == ["A->B"]
    f = c.flows[0]
    assert f["replication.factor"] == 2 and f["offset-syncs.topic.location"] == "source"
    assert f["emit.heartbeats.enabled"] and f["emit.checkpoints.enabled"]
    assert not f["sync.group.offsets.enabled"] and not f.exactly_once
    assert isinstance(f.policy, DefaultReplicationPolicy)
    assert f.group_id == "mm2-A->B"
    assert c.warnings == []
    assert (f.offset_syncs_cluster, f.offset_syncs_topic) == ("A", "mm2-offset-syncs.B.internal")
    f = cfg(**{"offset-syncs.topic.location": "target"}).flows[0]
    assert (f.offset_syncs_cluster, f.offset_syncs_topic) == ("B", "mm2-offset-syncs.A.internal")


def test_flow_keys_beat_top_level_keys():
    f = cfg(**{"replication.factor": "3", "A->B.replication.factor": "1",
               "topics": "x.*", "A->B.exactly.once.support": "enabled"}).flows[0]
    assert f["replication.factor"] == 1 and f.exactly_once
    assert f.replicates_topic("x1") and not f.replicates_topic("y1")


def test_topic_filter_excludes_internal_and_cycles():
    f = cfg(**{"topics.exclude": "secret.*"}).flows[0]
    assert f.replicates_topic("orders")
    assert not f.replicates_topic("secret-1")
    assert not f.replicates_topic("__consumer_offsets")
    assert not f.replicates_topic("mm2-offset-syncs.B.internal")
    assert not f.replicates_topic("A.checkpoints.internal")
    assert not f.replicates_topic("B.orders")            # came from B: would loop
    assert f.replicates_topic("C.orders")                # came from C: A->B passes it on
    assert f.replicates_topic("heartbeats")


def test_legacy_blacklist_names_and_groups():
    f = cfg(**{"A->B.topics.blacklist": "t1", "groups": "g.*",
               "groups.exclude": "g-skip"}).flows[0]
    assert not f.replicates_topic("t1") and f.replicates_topic("t2")
    assert f.replicates_group("g1") and not f.replicates_group("g-skip")
    assert not f.replicates_group("other") and not f.replicates_group("mm2-A->B")


def test_client_overrides_per_cluster_and_role():
    f = cfg(**{"A.security.protocol": "SASL_SSL", "A.sasl.mechanism": "PLAIN",
               "A.consumer.fetch.min.bytes": "10", "B.producer.linger.ms": "7",
               "A.consumer.key.deserializer": "org.Foo"}).flows[0]
    src = f.client("A", "consumer")
    assert src["security.protocol"] == "SASL_SSL" and src["sasl.mechanism"] == "PLAIN"
    assert src["fetch.min.bytes"] == "10" and "key.deserializer" not in src
    assert f.client("B", "producer")["linger.ms"] == "7"
    assert "linger.ms" not in f.client("B", "consumer")
    assert f.client("A", "admin")["bootstrap.servers"] == "a:9092"


def test_unknown_keys_warn_once_each_and_known_ones_do_not():
    c = cfg(**{"frobnicate": "1", "A->B.nonsense": "2", "tasks.max": "4",
               "A->B.emit.checkpoints.interval.seconds": "5"})
    assert len(c.warnings) == 2
    assert any("'frobnicate'" in w for w in c.warnings)
    assert any("'A->B.nonsense'" in w for w in c.warnings)


def test_identity_policy_and_separator():
    f = cfg(**{"replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}).flows[0]
    assert isinstance(f.policy, IdentityReplicationPolicy)
    assert f.policy.format_remote_topic("A", "orders") == "orders"
    f = cfg(**{"replication.policy.separator": "_"}).flows[0]
    assert f.policy.format_remote_topic("A", "orders") == "A_orders"


def test_clusters_filter_selects_flows_by_target():
    props = {**BASE, "B->A.enabled": "true"}
    assert [f.name for f in MirrorConfig.from_props(props, ["A"]).flows] == ["B->A"]
    assert len(MirrorConfig.from_props(props).flows) == 2


@pytest.mark.parametrize("props, words", [
    ({"clusters": ""}, "clusters"),
    ({**BASE, "A->B.enabled": "false"}, "no replication flow"),
    ({**BASE, "B.bootstrap.servers": ""}, "B.bootstrap.servers"),
    ({**BASE, "replication.factor": "two"}, "replication.factor"),
    ({**BASE, "A->B.topics": "(unclosed"}, "A->B.topics"),
    ({**BASE, "exactly.once.support": "maybe"}, "exactly.once.support"),
    ({**BASE, "offset-syncs.topic.location": "moon"}, "offset-syncs.topic.location"),
    ({**BASE, "replication.policy.class": "com.Foo"}, "replication.policy.class"),
    ({**BASE, "A->B.enabled": "yes"}, "A->B.enabled"),
])
def test_errors_are_one_line(props, words):
    with pytest.raises(MirrorConfigError) as e:
        MirrorConfig.from_props(props)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unknown_target_in_clusters_filter():
    with pytest.raises(MirrorConfigError, match="--clusters"):
        MirrorConfig.from_props(BASE, ["C"])


def test_from_file(tmp_path):
    p = tmp_path / "mm2.properties"
    p.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                 "A->B.enabled = true\n# comment\nA->B.topics = t1, \\\n  t2\n")
    f = MirrorConfig.from_file(str(p)).flows[0]
    assert f.replicates_topic("t2") and not f.replicates_topic("t3")
    with pytest.raises(MirrorConfigError, match="cannot read"):
        MirrorConfig.from_file(str(tmp_path / "missing"))


def test_the_readme_example_parses_without_warnings(tmp_path):
    from tests.integration.broker import REPO_ROOT
    text = (REPO_ROOT / "README.md").read_text()
    block = text[text.index("## Mirroring between clusters"):]
    block = block[block.index("```properties") + len("```properties"):]
    p = tmp_path / "mm2.properties"
    p.write_text(block[:block.index("```")])
    c = MirrorConfig.from_file(str(p))
    assert [f.name for f in c.flows] == ["A->B", "B->A"] and c.warnings == []
    assert c.flows[0].exactly_once and c.flows[0]["sync.group.offsets.enabled"]
