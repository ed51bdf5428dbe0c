"""Where a request runs when the broker has several workers: the `scope` of each API
in the handler registry (workers/handlers/__init__.py), which the router
(workers/router.py) reads; nothing else decides where a request goes.

* LOCAL: on the worker the connection landed on (the front): Metadata, ApiVersions,
  admin APIs, FindCoordinator; metadata comes from the controller's pushes.
* PARTITION: split by the owner of each (topic, partition), the parts merged back in
  request order; `partition(fan_out)` when the API splits itself (Fetch's session and
  long poll: workers/handlers/fetch/fanout.py), `fan_out(router, ctx, request, handle)`.
* GROUP / TXN: to the worker owning the group's `__consumer_offsets` partition, or the
  transactional id's `__transaction_state` partition; requests naming several are split
  per coordinator.
* `cluster(merge)`: to every worker (each answers for what it owns), the answers
  merged; `merge(answers)`, or `merge(request, answers)` with `cluster_by_request`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple


class Scope(NamedTuple):
    kind: str                           # "local", "partition", "group", "txn", "cluster"
    fan_out: Callable | None = None     # partition: the API's own split
    merge: Callable | None = None       # cluster: (request, answers) -> answer


LOCAL = Scope("local")
PARTITION = Scope("partition")
GROUP = Scope("group")
TXN = Scope("txn")


def partition(fan_out: Callable) -> Scope:
    return Scope("partition", fan_out=fan_out)


def cluster(merge: Callable) -> Scope:
    """Every worker answers; `merge(answers)` makes one answer of theirs."""
    return Scope("cluster", merge=lambda request, answers: merge(answers))


def cluster_by_request(merge: Callable) -> Scope:
    """Every worker answers; `merge(request, answers)` makes one answer of theirs."""
    return Scope("cluster", merge=merge)
