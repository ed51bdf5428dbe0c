"""Connection quotas across workers: totals and per-address counts in the shared table
(each worker's region written by it alone), max.connections (wait), per-ip (refuse),
overrides by address and by resolved host name, a worker's region reset on respawn."""
import pytest

from workers.connection_quotas import (IP_SLOTS, ConnectionQuotas, ConnectionTable,
                                       TooManyConnections, address_key, parse_overrides)


def quotas(table, worker, **cfg):
    return ConnectionQuotas(lambda: cfg, table, worker)


def test_counts_are_shared_between_workers():
    table = ConnectionTable(2)
    a, b = quotas(table, 0), quotas(table, 1)
    assert a.admit("10.0.0.1") and a.admit("10.0.0.1") and b.admit("10.0.0.1")
    assert b.admit("::1")
    assert table.total() == 4
    assert a.ip_count("10.0.0.1") == b.ip_count("10.0.0.1") == 3
    assert a.ip_count("::1") == 1
    b.release("10.0.0.1")
    a.release("10.0.0.1")
    assert a.ip_count("10.0.0.1") == 1 and table.total() == 2


def test_max_connections_is_per_broker():
    table = ConnectionTable(2)
    cfg = {"max.connections": 3}
    a = ConnectionQuotas(lambda: cfg, table, 0)
    b = ConnectionQuotas(lambda: cfg, table, 1)
    assert a.admit("10.0.0.1") and b.admit("10.0.0.2") and b.admit("10.0.0.3")
    assert not a.admit("10.0.0.4")                       # nothing counted when refused
    assert table.total() == 3 and not a.slot_available()
    b.release("10.0.0.2")
    assert a.slot_available() and a.admit("10.0.0.4")
    cfg["max.connections"] = 10                          # dynamic: read on each admit
    assert b.admit("10.0.0.5")


def test_per_ip_limit_and_overrides(monkeypatch):
    table = ConnectionTable(2)
    cfg = {"max.connections.per.ip": 2,
           "max.connections.per.ip.overrides": "10.0.0.9:4,[::1]:0,broker-host:1"}
    resolved = {"broker-host": "10.0.0.7"}

    def fake_resolve(host, *_):
        return [(0, 0, 0, "", (resolved[host], 0))]
    import workers.connection_quotas as cq
    monkeypatch.setattr(cq, "parse_overrides",
                        lambda raw, parse=cq.parse_overrides: parse(raw, resolve=fake_resolve))
    a = ConnectionQuotas(lambda: cfg, table, 0)
    b = ConnectionQuotas(lambda: cfg, table, 1)
    assert a.admit("10.0.0.1") and b.admit("10.0.0.1")
    with pytest.raises(TooManyConnections) as e:
        a.admit("10.0.0.1")
    assert e.value.limit == 2 and a.ip_count("10.0.0.1") == 2
    assert all(a.admit("10.0.0.9") for _ in range(4))
    with pytest.raises(TooManyConnections):
        b.admit("10.0.0.9")
    with pytest.raises(TooManyConnections):
        a.admit("::1")
    assert b.admit("10.0.0.7")
    with pytest.raises(TooManyConnections):
        a.admit("10.0.0.7")


def test_parse_overrides():
    assert parse_overrides("") == {}
    assert parse_overrides(" 127.0.0.1:200 , ::1:5") == {
        address_key("127.0.0.1"): 200, address_key("::1"): 5}
    with pytest.raises(ValueError):
        parse_overrides("127.0.0.1")
    with pytest.raises(ValueError):
        parse_overrides("127.0.0.1:many")


def test_reset_forgets_a_dead_workers_connections():
    table = ConnectionTable(2)
    a = quotas(table, 0)
    a.admit("10.0.0.1")
    assert table.total() == 1 and table.count(address_key("10.0.0.1")) == 1
    table.reset(0)                              # the supervisor, before the respawn
    assert table.total() == 0 and table.count(address_key("10.0.0.1")) == 0


def test_entries_of_gone_addresses_are_reused():
    table = ConnectionTable(1)
    a = quotas(table, 0)
    for i in range(IP_SLOTS + 100):             # more addresses over time than entries
        host = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        assert a.admit(host)
        a.release(host)
    assert a.admit("10.200.0.1") and a.admit("10.200.0.1")
    assert table.count(address_key("10.200.0.1")) == 2 and table.total() == 2


def test_a_handed_over_connection_is_counted_by_its_new_worker_past_the_limits():
    """workers/handoff.py: the owner counts a moved connection without checking the
    limits (it was admitted); the broker's count is one over until the front releases."""
    table = ConnectionTable(2)
    cfg = {"max.connections": 2, "max.connections.per.ip": 2}
    a = ConnectionQuotas(lambda: cfg, table, 0)
    b = ConnectionQuotas(lambda: cfg, table, 1)
    assert a.admit("10.0.0.1") and a.admit("10.0.0.1")
    b.adopt("10.0.0.1")                                  # at both limits: counted anyway
    assert table.total() == 3 and b.ip_count("10.0.0.1") == 3
    a.release("10.0.0.1")                                # the front lets go once told
    assert table.total() == 2 and a.ip_count("10.0.0.1") == 2
    assert not a.admit("10.0.0.2")
