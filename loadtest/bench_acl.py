"""What enforcing ACLs costs (issue #17): end to end and per request.

    .venv/bin/python -m loadtest.bench_acl [--mb 20] [--size 1000] [--rounds 3] [--checks 20000]

* End to end: two brokers side by side, one without an authorizer, one with
  `authorizer.class.name=kafka.security.authorizer.AclAuthorizer` and a realistic ACL set
  (100 ACLs: 96 for other principals on other topics and groups, LITERAL and PREFIXED,
  and the client, User:ANONYMOUS, allowed by PREFIXED ACLs on `bench-` topics and
  groups). Per round and broker, in alternation: produce `--mb` MB of `--size`-byte
  records (confluent-kafka, acks=1, loadtest/bench_clients.py) and consume them; the
  medians of the rounds and the ratio ACL / no ACL (goal: the ACL checks cost < 5 %).
* Per request, in this process: `workers.authz.front_check` on a Produce request of one
  topic, microseconds per call: no authorizer; the authorizer with the connection's
  cache hit (the steady state); a cache miss (a new connection each call: the
  authorizer's own decision over the 100 ACLs).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit
import uuid
from pathlib import Path
from types import SimpleNamespace

from mpbroker.metadata.model import ClusterMetadata, set_acls
from mpbroker.protocol import api_keys
from mpbroker.security.acl import (ALL, ALLOW, DENY, DESCRIBE, GROUP, LITERAL, PREFIXED, READ,
                                   TOPIC, WRITE, AclBinding)
from mpbroker.testing import MpBroker
from workers.authz import front_check

from loadtest.bench_clients import consume, produce
from loadtest.peers import create_topic, delete_topic

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
CLIENT = "User:ANONYMOUS"


def acl_set() -> list[AclBinding]:
    """100 ACLs: the client's 4, and 96 of 24 other users."""
    out = [AclBinding(TOPIC, "bench-", PREFIXED, CLIENT, "*", ALL, ALLOW),
           AclBinding(GROUP, "bench-", PREFIXED, CLIENT, "*", ALL, ALLOW),
           AclBinding(TOPIC, "bench-secret", LITERAL, CLIENT, "*", ALL, DENY),
           AclBinding(TOPIC, "audit-", PREFIXED, CLIENT, "*", DESCRIBE, ALLOW)]
    for u in range(24):
        user = f"User:app{u}"
        out += [AclBinding(TOPIC, f"app{u}-", PREFIXED, user, "*", WRITE, ALLOW),
                AclBinding(TOPIC, f"app{u}-events", LITERAL, user, "*", READ, ALLOW),
                AclBinding(GROUP, f"app{u}-consumers", LITERAL, user, "*", READ, ALLOW),
                AclBinding(TOPIC, "bench-", PREFIXED, user, "10.0.0.1", WRITE, DENY)]
    return out


def add_acls(bootstrap: str, acls) -> None:
    from confluent_kafka.admin import (AclBinding as Binding, AclOperation, AclPermissionType,
                                       AdminClient, ResourcePatternType, ResourceType)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = {TOPIC: "TOPIC", GROUP: "GROUP"}
    ops = {ALL: "ALL", READ: "READ", WRITE: "WRITE", DESCRIBE: "DESCRIBE"}
    bindings = [Binding(ResourceType[names[b.resource_type]], b.name,
                        ResourcePatternType.LITERAL if b.pattern_type == LITERAL else ResourcePatternType.PREFIXED,
                        b.principal, b.host, AclOperation[ops[b.operation]],
                        AclPermissionType.ALLOW if b.permission == ALLOW else AclPermissionType.DENY)
                for b in acls]
    for f in admin.create_acls(bindings, request_timeout=30).values():
        f.result(30)


def end_to_end(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain = MpBroker(Path(tmp) / "plain").start()
        secured = MpBroker(Path(tmp) / "acl", {"authorizer.class.name": AUTHORIZER,
                                               "super.users": "User:bench-admin"})
        # the ACLs are made while everyone is allowed, then the broker restarts strict
        secured.overrides["allow.everyone.if.no.acl.found"] = "true"
        secured.start()
        try:
            add_acls(secured.bootstrap, acl_set())
            secured.stop()
            secured.overrides["allow.everyone.if.no.acl.found"] = "false"
            secured.start()
            count = max(1000, int(args.mb * 1e6 / args.size))
            rates = {"no ACLs": ([], []), "ACLs": ([], [])}
            for _ in range(args.rounds):
                for label, b in (("no ACLs", plain), ("ACLs", secured)):
                    topic = f"bench-{uuid.uuid4().hex[:6]}"
                    create_topic(b.bootstrap, topic)
                    p_s = produce(b.bootstrap, topic, args.size, count, "1")
                    c_s = consume(b.bootstrap, topic, count)
                    delete_topic(b.bootstrap, topic)
                    rates[label][0].append(count * args.size / 1e6 / p_s)
                    rates[label][1].append(count * args.size / 1e6 / c_s)
        finally:
            plain.stop()
            secured.stop()
    med = {k: (statistics.median(p), statistics.median(c)) for k, (p, c) in rates.items()}
    print(f"end to end: {count} records of {args.size} B, {args.rounds} rounds (medians, MB/s)")
    print(f"{'':10} {'produce':>9} {'consume':>9}")
    for k, (p, c) in med.items():
        print(f"{k:10} {p:9.1f} {c:9.1f}")
    print(f"{'ratio':10} {med['ACLs'][0] / med['no ACLs'][0]:9.3f} {med['ACLs'][1] / med['no ACLs'][1]:9.3f}")


def per_request(args) -> None:
    md = set_acls(ClusterMetadata("bench"), acl_set())
    request = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
               "topic_data": [{"name": "bench-orders", "partition_data": [{"index": 0, "records": None}]}]}

    def broker(authorizer: str):
        return SimpleNamespace(metadata=md, config={
            "authorizer.class.name": authorizer, "super.users": "", "zookeeper.connect": None,
            "allow.everyone.if.no.acl.found": False})

    def ctx(conn):
        return SimpleNamespace(api_key=api_keys.PRODUCE, api_version=9, client_host="127.0.0.1",
                               connection=conn, principal=CLIENT)
    off, on = broker(""), broker(AUTHORIZER)
    hit_ctx = ctx(SimpleNamespace())
    assert front_check(on, hit_ctx, request) is None        # allowed, and now cached
    cases = {"no authorizer": lambda: front_check(off, hit_ctx, request),
             "ACLs, cache hit": lambda: front_check(on, hit_ctx, request),
             "ACLs, cache miss": lambda: front_check(on, ctx(SimpleNamespace()), request)}
    print(f"per request (front_check on a 1-topic Produce, {len(acl_set())} ACLs; "
          f"median of 5 x {args.checks} calls)")
    for label, fn in cases.items():
        runs = timeit.repeat(fn, number=args.checks, repeat=5)
        print(f"{label:18} {statistics.median(runs) / args.checks * 1e6:7.2f} us")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=20.0, help="MB produced and consumed per round")
    p.add_argument("--size", type=int, default=1000, help="record size in bytes")
    p.add_argument("--rounds", type=int, default=3, help="rounds per broker (medians)")
    p.add_argument("--checks", type=int, default=20000, help="calls per timing (per request)")
    p.add_argument("--skip-end-to-end", action="store_true", help="only the per-request part")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    per_request(args)
    if not args.skip_end_to_end:
        end_to_end(args)
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
