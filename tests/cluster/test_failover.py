"""Failover in cluster mode, real ZooKeeper and three real brokers: controller failover
(kill -9), leader failover with clients producing and consuming, controlled shutdown
(SIGTERM; and when it cannot move a leadership, the broker stops after its retries),
unclean leader election, preferred leader election (ElectLeaders), ZooKeeper session
expiry (SIGSTOP). Timings are printed (`-s` shows them)."""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.slow


def create_topic(c, name, partitions=3, rf=3, config=None):
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    fs = a.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                         operation_timeout=30, request_timeout=30)
    fs[name].result(30)


def leaders_seen_by(c, bootstrap, topic):
    a = AdminClient({"bootstrap.servers": bootstrap})
    md = a.list_topics(topic, timeout=10)
    return {p: pm.leader for p, pm in md.topics[topic].partitions.items()}


def produce(bootstrap, topic, values, partition=0, acks="1"):
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": 30000,
                  "retry.backoff.ms": 200})
    errors = []
    for v in values:
        p.produce(topic, v, partition=partition,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(40) == 0
    assert not errors, errors


def consume(bootstrap, topic, partition, start_offset, n, timeout=30.0):
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.time()}",
                     "enable.auto.commit": False})
    cons.assign([TopicPartition(topic, partition, start_offset)])
    out, deadline = [], time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                out.append(m.value())
    finally:
        cons.close()
    return out


def test_controller_failover_on_kill(cluster):
    c = cluster(3)
    cid, epoch = c.controller()
    t0 = time.monotonic()
    c.kill(cid)
    new = c.wait_for(lambda: (lambda x: x if x[0] not in (-1, cid) else None)(c.controller()),
                     30, "a new controller")
    took = time.monotonic() - t0
    print(f"\ncontroller failover after kill -9: {took:.2f}s (session timeout 4s)")
    assert new[1] > epoch
    # the survivors report the new controller and no longer list the dead broker
    for i in c.brokers:
        if i == cid:
            continue
        c.wait_for(lambda: (lambda md: md.controller_id == new[0] and cid not in md.brokers)(
            AdminClient({"bootstrap.servers": c.brokers[i].bootstrap}).list_topics(timeout=10)),
            15, f"broker {i} sees controller {new[0]}")
    # the killed broker comes back as a follower of the cluster, not the controller
    c.start(cid)
    c.wait_for(lambda: cid in c.live_ids(), 30, "rejoin")
    assert c.controller() == new


def test_leader_killed_new_leader_from_isr_clients_continue(cluster):
    c = cluster(3)
    create_topic(c, "fo", partitions=1, rf=3)
    st = c.state("fo", 0)
    old_leader, old_epoch = st["leader"], st["leader_epoch"]
    produce(c.bootstrap, "fo", [b"before-%d" % i for i in range(5)])
    t0 = time.monotonic()
    c.kill(old_leader)
    st2 = c.wait_for(lambda: (lambda s: s if s["leader"] not in (old_leader, -1) else None)(
        c.state("fo", 0)), 30, "a new leader")
    print(f"\nleader failover after kill -9: {time.monotonic() - t0:.2f}s")
    assert st2["leader"] in st["isr"] and st2["leader_epoch"] > old_epoch
    assert old_leader not in st2["isr"]
    # every live broker's Metadata shows the new leader
    for i, b in c.brokers.items():
        if i != old_leader:
            c.wait_for(lambda: leaders_seen_by(c, b.bootstrap, "fo")[0] == st2["leader"], 15,
                       f"broker {i} reports leader {st2['leader']}")
    # clients keep working: produce to the new leader and read it back
    produce(c.bootstrap, "fo", [b"after-%d" % i for i in range(5)])
    got = consume(c.bootstrap, "fo", 0, 0, 10, timeout=30)
    assert [v for v in got if v.startswith(b"after-")] == [b"after-%d" % i for i in range(5)]


def test_controlled_shutdown_moves_leadership_first(cluster):
    c = cluster(3)
    create_topic(c, "cs", partitions=3, rf=3)
    led = {p: c.state("cs", p)["leader"] for p in range(3)}
    victim = led[0]
    t0 = time.monotonic()
    rc = c.stop(victim)
    took = time.monotonic() - t0
    print(f"\ncontrolled shutdown (SIGTERM to exit): {took:.2f}s")
    assert rc == 0
    log = c.brokers[victim].log_text()
    assert f"controlled shutdown of broker {victim} succeeded" in log
    for p in range(3):
        s = c.state("cs", p)
        assert s["leader"] != victim and s["leader"] != -1
        assert victim not in s["isr"]
        # StopReplica(delete=false) for what it followed: its replica fetchers stopped
        assert (f"stopping the replica of cs-{p} (StopReplica)" in log) == (led[p] != victim)
    # leadership moved before the broker went away: the move is logged by the controller
    # before the broker's registration disappeared
    assert victim not in c.live_ids()


def test_preferred_leader_election_with_admin_client(cluster):
    c = cluster(3, overrides={"auto.leader.rebalance.enable": "false"})
    create_topic(c, "pref", partitions=1, rf=3)
    zk = c.zk_client()
    path = "/brokers/topics/pref/partitions/0/state"
    data, stat = zk.get(path)
    st = json.loads(data)
    ar = json.loads(zk.get("/brokers/topics/pref")[0])["partitions"]["0"]
    assert st["leader"] == ar[0]
    # a past failover left the second replica leading (written as a controller would)
    st.update(leader=ar[1], leader_epoch=st["leader_epoch"] + 1)
    zk.set(path, json.dumps(st).encode(), version=stat.version)
    c.wait_for(lambda: leaders_seen_by(c, c.bootstrap, "pref")[0] == ar[1], 15, "moved leader")
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    fut = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)])
    result = fut.result(20)
    assert result[TopicPartition("pref", 0)] is None
    s = c.state("pref", 0)
    assert s["leader"] == ar[0] and s["leader_epoch"] == st["leader_epoch"] + 1
    # again: nothing to do
    fut = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pref", 0)])
    err = fut.result(20)[TopicPartition("pref", 0)]
    assert err is not None and "ELECTION_NOT_NEEDED" in str(err)


def test_session_expiry_removes_broker_and_it_rejoins(cluster):
    c = cluster(3)
    create_topic(c, "se", partitions=3, rf=3)
    cid, epoch = c.controller()
    victim = cid                   # the controller itself: it must lose its controllership
    t0 = time.monotonic()
    c.pause(victim)
    try:
        c.wait_for(lambda: victim not in c.live_ids(), 20, "session expiry")
        gone = time.monotonic() - t0
        new = c.wait_for(lambda: (lambda x: x if x[0] not in (-1, victim) else None)(c.controller()),
                         20, "a new controller")
        c.wait_for(lambda: all(c.state("se", p)["leader"] not in (victim, -1) for p in range(3)),
                   20, "leaders moved off the expired broker")
        print(f"\nsession expired after {gone:.2f}s of SIGSTOP; leaders moved at "
              f"{time.monotonic() - t0:.2f}s")
    finally:
        c.resume(victim)
    t1 = time.monotonic()
    c.wait_for(lambda: victim in c.live_ids(), 30, "re-registration after SIGCONT")
    print(f"rejoined {time.monotonic() - t1:.2f}s after SIGCONT")
    assert new[1] > epoch
    assert c.controller() == new          # the old controller resigned, did not take over
    assert c.brokers[victim].is_alive()
    # the rejoined broker serves Metadata with the whole cluster again
    c.wait_for(lambda: sorted(AdminClient({"bootstrap.servers": c.brokers[victim].bootstrap})
                              .list_topics(timeout=10).brokers) == [1, 2, 3], 20, "full view")


def test_auto_leader_rebalance_restores_preferred_leaders(cluster):
    c = cluster(3, overrides={"leader.imbalance.check.interval.seconds": 1,
                              "leader.imbalance.per.broker.percentage": 10})
    create_topic(c, "auto", partitions=1, rf=3)
    zk = c.zk_client()
    path = "/brokers/topics/auto/partitions/0/state"
    data, stat = zk.get(path)
    st = json.loads(data)
    ar = json.loads(zk.get("/brokers/topics/auto")[0])["partitions"]["0"]
    st.update(leader=ar[1], leader_epoch=st["leader_epoch"] + 1)
    zk.set(path, json.dumps(st).encode(), version=stat.version)
    t0 = time.monotonic()
    s = c.wait_for(lambda: (lambda s: s if s["leader"] == ar[0] else None)(c.state("auto", 0)),
                   15, "the preferred leader back")
    print(f"\nauto leader rebalance after {time.monotonic() - t0:.2f}s (interval 1s)")
    assert s["leader_epoch"] == st["leader_epoch"] + 1


def test_controlled_shutdown_of_the_controller_broker(cluster):
    c = cluster(3)
    create_topic(c, "csc", partitions=3, rf=3)
    cid, epoch = c.controller()
    t0 = time.monotonic()
    assert c.stop(cid) == 0
    stopped = time.monotonic() - t0
    assert f"controlled shutdown of broker {cid} succeeded" in c.brokers[cid].log_text()
    new = c.wait_for(lambda: (lambda x: x if x[0] not in (-1, cid) else None)(c.controller()),
                     10, "a new controller")
    print(f"\ncontroller broker SIGTERM: exited after {stopped:.2f}s, new controller "
          f"{time.monotonic() - t0:.2f}s after SIGTERM")
    assert new[1] > epoch
    for p in range(3):
        s = c.state("csc", p)
        assert s["leader"] not in (cid, -1) and cid not in s["isr"]


def test_failed_controlled_shutdown_stops_anyway_then_unclean_election(cluster):
    """Two brokers, a topic with unclean.leader.election.enable=true. The follower is
    killed, so the leader is the only ISR member: its controlled shutdown cannot move the
    leadership, it retries controlled.shutdown.max.retries times and stops anyway. The
    partition is offline; when the out-of-sync replica comes back, unclean election
    makes it the leader and clients work again."""
    c = cluster(2, overrides={"controlled.shutdown.max.retries": 2})
    create_topic(c, "ul", partitions=1, rf=2, config={"unclean.leader.election.enable": "true"})
    c.wait_for(lambda: len(c.state("ul", 0)["isr"]) == 2, 20, "full ISR")
    leader = c.state("ul", 0)["leader"]
    other = 3 - leader
    produce(c.bootstrap, "ul", [b"a%d" % i for i in range(3)], acks="all")
    c.kill(other)
    c.wait_for(lambda: c.state("ul", 0)["isr"] == [leader], 20, "ISR shrunk to the leader")
    t0 = time.monotonic()
    assert c.stop(leader) == 0
    took = time.monotonic() - t0
    log = c.brokers[leader].log_text()
    assert "controlled shutdown attempt 1/2" in log and "controlled shutdown attempt 2/2" in log
    assert f"controlled shutdown of broker {leader} failed: proceeding to an unclean shutdown" in log
    print(f"\nfailed controlled shutdown (2 attempts): exited after {took:.2f}s")
    c.start(other)
    s = c.wait_for(lambda: (lambda s: s if s["leader"] == other else None)(c.state("ul", 0)), 30,
                   "unclean election of the out-of-sync replica")
    assert s["isr"] == [other]
    produce(c.brokers[other].bootstrap, "ul", [b"after"], acks="all")
    assert consume(c.brokers[other].bootstrap, "ul", 0, 0, 4) == [b"a0", b"a1", b"a2", b"after"]
