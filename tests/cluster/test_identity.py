"""cluster.id and broker.id in cluster mode: /cluster/id, meta.properties checks (seed 000
§6.5.1), broker.id generation from /brokers/seqid, ZooKeeper unreachable at startup."""
from __future__ import annotations

import json

import pytest

from tests.integration.broker import Broker, BrokerStartError, free_port


def props(b):
    out = {}
    for line in (b.data_dir / "meta.properties").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = v
    return out


def test_cluster_id_persists_and_a_foreign_cluster_is_refused(cluster, zookeeper, tmp_path):
    c = cluster(1)
    b = c.brokers[1]
    cid = json.loads(c.zk_client().get("/cluster/id")[0])["id"]
    assert props(b) == {"version": "0", "broker.id": "1", "cluster.id": cid}
    b.restart()
    assert json.loads(c.zk_client().get("/cluster/id")[0])["id"] == cid
    assert props(b)["cluster.id"] == cid
    b.stop()
    # the same data dir pointed at another cluster (another chroot, another /cluster/id)
    b.overrides["zookeeper.connect"] = f"{zookeeper.connect}/another-cluster-{tmp_path.name}"
    with pytest.raises(BrokerStartError) as e:
        b.start()
    msg = str(e.value)
    assert "InconsistentClusterIdError" in msg and f"Some({cid})" in msg
    assert props(b)["cluster.id"] == cid          # nothing overwritten


def test_broker_id_generation(cluster):
    c = cluster(0)
    c.add(-1)       # key -1: a broker without broker.id
    c.brokers[-1].overrides["broker.id"] = "-1"
    c.brokers[-1].overrides["reserved.broker.max.id"] = "1000"
    b = c.brokers[-1].start()
    c.wait_for(lambda: c.live_ids() == [1001], 20, "generated id 1001")
    assert props(b)["broker.id"] == "1001"
    b.restart()     # the stored id is kept, no new id drawn
    c.wait_for(lambda: c.live_ids() == [1001], 20, "id 1001 again")
    other = c.add(-2, {"broker.id": "-1"})
    other.start()
    c.wait_for(lambda: c.live_ids() == [1001, 1002], 20, "second generated id")
    assert props(other)["broker.id"] == "1002"


def test_zookeeper_unreachable_fails_startup_clearly(tmp_path):
    port = free_port()
    b = Broker(tmp_path / "b", {"zookeeper.connect": f"127.0.0.1:{port}",
                                "zookeeper.connection.timeout.ms": "1500"}, name="nozk",
               start_timeout=30)
    with pytest.raises(BrokerStartError) as e:
        b.start()
    assert "Timed out waiting for connection to ZooKeeper" in str(e.value)
    assert b.proc.returncode not in (0, None)
