"""Authorization on the front (issue #17): one check per request, before routing.

`front_check(broker, ctx, request)` runs in `Dispatcher.dispatch` after the body is
decoded. It reads the API's row of the ACL table (mpbroker/security/api_acls.py) and
answers one of:

* None: go on with the request as it is (no authorizer, nothing to check, all allowed);
* a `Verdict` with `answer`: the whole request is refused, `answer` is the response
  body (the API's error response with the *_AUTHORIZATION_FAILED code; None for an
  acks=0 Produce, which owes no response);
* a `Verdict` with `request` (the request without the denied items) and `finish(body)`,
  which adds the denied items' errors to the response (or drops from it what the
  principal may not see: Metadata's topic listing, ListGroups, ListTransactions).

Beyond Kafka, with or without an authorizer: a broker with no other brokers (no
`zookeeper.connect`) refuses the inter-broker APIs (INTER_BROKER) and replica fetches
(Fetch / OffsetForLeaderEpoch with a replica id >= 0) with CLUSTER_AUTHORIZATION_FAILED,
since no follower or controller exists to send them (unless
`lone.broker.inter.broker.requests.enable`, for tests that play one by hand).

The worker's `Authorizer` (mpbroker/security/authorizer.py) is rebuilt when its
metadata's `acl_version` or its config changes; each connection keeps a
`DecisionCache` keyed by (principal, operation, resource type, name), emptied when the
authorizer is rebuilt (or the principal changes). The principal is `ctx.principal` (set by the SASL/TLS layer;
"User:ANONYMOUS" when absent), the host the client's address.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from mpbroker.metadata.model import MetadataError
from mpbroker.protocol import api_keys
from mpbroker.protocol.error_response import error_response
from mpbroker.protocol.errors import ErrorCode
from mpbroker.security.acl import (CLUSTER, CLUSTER_ACTION, CLUSTER_NAME, CREATE, DESCRIBE,
                                   ALTER_CONFIGS, DESCRIBE_CONFIGS, GROUP, IDEMPOTENT_WRITE, READ,
                                   TOPIC, TRANSACTIONAL_ID, WRITE)
from mpbroker.security.api_acls import API_ACLS, INTER_BROKER
from mpbroker.security.authorizer import Authorizer, DecisionCache, is_acl_authorizer, super_users

ANONYMOUS = "User:ANONYMOUS"

DENIED_CODE = {TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
               GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
               CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
               TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

CONFIG_RESOURCE = {2: TOPIC, 4: CLUSTER, 8: CLUSTER}   # DescribeConfigs resource types


class Verdict(NamedTuple):
    answer: Optional[dict] = None
    request: Optional[dict] = None
    finish: Optional[Callable[[dict], dict]] = None
    refused: bool = False


def principal_of(ctx) -> str:
    return getattr(ctx, "principal", None) or getattr(ctx.connection, "principal", None) or ANONYMOUS


def authorizer_of(broker) -> Optional[Authorizer]:
    """The worker's authorizer for its current metadata and config (None: no authorizer)."""
    cfg, md = broker.config, broker.metadata
    version = md.acl_version if md is not None else -1
    held = broker.__dict__.get("_authorizer")
    if held is not None and held[0] == version and held[1] is cfg:
        return held[2]
    az = None
    if is_acl_authorizer(cfg.get("authorizer.class.name") or ""):
        az = Authorizer(md.acls if md is not None else (), super_users(cfg.get("super.users")),
                        bool(cfg.get("allow.everyone.if.no.acl.found")))
    broker._authorizer = (version, cfg, az)
    return az


class Asker:
    """A connection's decisions under one authorizer (kept on the connection, replaced
    with an empty one when the authorizer or the principal changes)."""

    __slots__ = ("az", "principal", "host", "cache")

    def __init__(self, az: Authorizer, principal: str, host: str):
        self.az, self.principal, self.host = az, principal, host
        self.cache = DecisionCache()
        self.cache.version = az

    def allowed(self, op: int, rtype: int, name: str) -> bool:
        key = (op, rtype, name)
        hit = self.cache.decisions.get(key)
        if hit is None:
            hit = self.az.authorize(self.principal, self.host, op, rtype, name)
            self.cache.put(key, hit)
        return hit


def asker_for(az: Authorizer, ctx) -> Asker:
    principal = principal_of(ctx)
    conn = ctx.connection
    asker = conn.__dict__.get("acl_asker") if conn is not None else None
    if asker is None or asker.az is not az or asker.principal != principal:
        asker = Asker(az, principal, ctx.client_host)
        if conn is not None:
            conn.acl_asker = asker
    return asker


def replica_fetch(api: int, request: dict) -> bool:
    if api == api_keys.FETCH:
        rid = request.get("replica_id", (request.get("replica_state") or {}).get("replica_id", -1))
        return rid is not None and rid >= 0
    if api == api_keys.OFFSET_FOR_LEADER_EPOCH:
        return request.get("replica_id", -2) >= 0
    return False


def front_check(broker, ctx, request: dict) -> Optional[Verdict]:
    cfg = getattr(broker, "config", None)
    if cfg is None:         # a broker stand-in without a config (unit tests): no checks
        return None
    api = ctx.api_key
    if (api in INTER_BROKER or replica_fetch(api, request)) and not cfg.get("zookeeper.connect") \
            and not cfg.get("lone.broker.inter.broker.requests.enable"):
        return refuse(ctx, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    checks = API_ACLS.get(api)
    if checks is None:
        return None
    az = authorizer_of(broker)
    if az is None:
        return None
    return Check(broker, ctx, request, asker_for(az, ctx)).run(checks)


def refuse(ctx, request, code) -> Verdict:
    if ctx.api_key == api_keys.PRODUCE and request.get("acks") == 0:
        return Verdict(answer=None, refused=True)
    return Verdict(answer=denied_response(ctx, request, code), refused=True)


def denied_response(ctx, request, code) -> dict:
    body = error_response(ctx.api_key, ctx.api_version, request, code)
    if ctx.api_key == api_keys.FETCH:       # clients expect empty records, not null
        for t in body.get("responses") or ():
            for p in t.get("partitions") or ():
                p["records"] = b""
    return body


class Check:
    """Applies an API's checks to one request."""

    def __init__(self, broker, ctx, request, asker: Asker):
        self.broker, self.ctx, self.asker = broker, ctx, asker
        self.original = request
        self.request = request
        self.denied: list = []          # (path, items, code)
        self.posts: list = []           # body -> body
        self.filtered: list = []        # paths that lost items

    def run(self, checks) -> Optional[Verdict]:
        for c in checks:
            if c.special is not None:
                code = getattr(self, "_" + c.special)()
            elif c.path is None and c.type == CLUSTER:
                code = None if self.asker.allowed(c.op, CLUSTER, CLUSTER_NAME) else DENIED_CODE[CLUSTER]
            elif c.path is None:
                name = self.request.get(c.field)
                code = None if name is None or self.asker.allowed(c.op, c.type, name) else DENIED_CODE[c.type]
            else:
                self.filter(c.path, c.field, c.op, c.type)
                code = None
            if code is not None:
                return refuse(self.ctx, self.original, code)
        if not self.denied and not self.posts:
            return None
        if (self.denied and self.ctx.api_key != api_keys.METADATA
                and all(not self.request.get(p) for p in self.filtered)):
            # nothing left to run: the error response of the whole request, its items
            # denied (a top-level error code stays 0, as for a per-item denial)
            verdict = refuse(self.ctx, self.original, self.denied[0][2])
            if verdict.answer is not None and "error_code" in verdict.answer:
                verdict.answer["error_code"] = 0
            return verdict
        return Verdict(request=self.request, finish=self.finish)

    # ---------------------------------------------------------------- items
    def name_of(self, item, fields) -> Optional[str]:
        if not fields or fields == ("",):
            return item
        for f in fields:
            if f in item:
                v = item[f]
                if f == "topic_id" or isinstance(v, (bytes, bytearray)):
                    try:
                        return self.broker.metadata.topic_by_id(bytes(v)).name
                    except MetadataError:
                        return None         # unknown id: the handler answers UNKNOWN_TOPIC_ID
                if v is not None:
                    return v
        return None

    def filter(self, path, fields, op, rtype, allowed: Callable | None = None) -> None:
        items = self.request.get(path)
        if not items:
            return
        keep, denied = [], []
        for item in items:
            name = self.name_of(item, fields)
            ok = name is None or (allowed(name) if allowed else self.asker.allowed(op, rtype, name))
            (keep if ok else denied).append(item)
        self.split(path, keep, denied, DENIED_CODE[rtype])

    def split(self, path, keep, denied, code) -> None:
        if not denied:
            return
        self.request = {**self.request, path: keep}
        self.filtered.append(path)
        self.denied.append((path, denied, code))

    def finish(self, body: dict) -> dict:
        if body is None:
            return body
        ctx = self.ctx
        for path, items, code in self.denied:
            err = denied_response(ctx, {**self.request, path: items}, code)
            for key, value in err.items():
                if isinstance(value, list) and value:
                    body[key] = list(body.get(key) or ()) + value
        for post in self.posts:
            body = post(body)
        return body

    # ---------------------------------------------------------------- specials
    def _fetch(self):
        if replica_fetch(api_keys.FETCH, self.request):
            return None if self.cluster(CLUSTER_ACTION) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        self.filter("topics", ("topic", "topic_id"), READ, TOPIC)
        return None

    def _replica_or_client(self):
        if replica_fetch(self.ctx.api_key, self.request) and not self.cluster(CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return None

    def _offset_fetch(self):
        """DESCRIBE on each topic asked for (v0-7: the request's, v8+: each group's);
        when a group asks for every topic (null), its answer keeps the describable ones."""
        if "groups" not in self.request:
            if self.request.get("topics") is None:
                self.listing("topics", TOPIC, "name")
            else:
                self.filter("topics", ("name",), DESCRIBE, TOPIC)
            return None
        ask = self.asker.allowed
        denied: dict = {}
        every: set = set()
        groups = []
        for g in self.request.get("groups") or ():
            topics = g.get("topics")
            if topics is None:
                every.add(g["group_id"])
            else:
                keep = [t for t in topics if ask(DESCRIBE, TOPIC, t["name"])]
                if len(keep) != len(topics):
                    denied[g["group_id"]] = [t for t in topics if t not in keep]
                    g = {**g, "topics": keep}
            groups.append(g)
        if not denied and not every:
            return None
        self.request = {**self.request, "groups": groups}

        def post(body):
            for g in body.get("groups") or ():
                gid = g["group_id"]
                if gid in every:
                    g["topics"] = [t for t in g.get("topics") or () if ask(DESCRIBE, TOPIC, t["name"])]
                g["topics"] = list(g.get("topics") or ()) + [
                    {"name": t["name"], "partitions": [
                        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                         "metadata": None, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
                        for p in t["partition_indexes"]]} for t in denied.get(gid, ())]
            return body
        self.posts.append(post)
        return None

    def _txn_verification(self):
        if "transactions" in self.request and not self.cluster(CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return None

    def cluster(self, op) -> bool:
        return self.asker.allowed(op, CLUSTER, CLUSTER_NAME)

    def _metadata(self):
        topics = self.request.get("topics")
        ask = self.asker.allowed
        if topics is None or (not topics and self.ctx.api_version == 0):
            self.listing("topics", TOPIC, "name")
            return None
        md = self.broker.metadata
        auto = (self.broker.config.get("auto.create.topics.enable")
                and self.request.get("allow_auto_topic_creation", True))
        create_all = None

        def allowed(name):
            nonlocal create_all
            if not ask(DESCRIBE, TOPIC, name):
                return False
            if auto and name not in md.topics:      # auto-creation: CREATE on cluster or topic
                if create_all is None:
                    create_all = self.cluster(CREATE)
                return create_all or ask(CREATE, TOPIC, name)
            return True
        self.filter("topics", ("name", "topic_id"), DESCRIBE, TOPIC, allowed)
        return None

    def _find_coordinator(self):
        rtype = TRANSACTIONAL_ID if self.request.get("key_type", 0) == 1 else GROUP
        if "coordinator_keys" in self.request:
            self.filter("coordinator_keys", ("",), DESCRIBE, rtype)
            return None
        key = self.request.get("key")
        return None if key is None or self.asker.allowed(DESCRIBE, rtype, key) else DENIED_CODE[rtype]

    def _create_topics(self):
        if not self.cluster(CREATE):
            self.filter("topics", ("name",), CREATE, TOPIC)
        return None

    def _init_producer_id(self):
        txn = self.request.get("transactional_id")
        if txn is not None:
            return None if self.asker.allowed(WRITE, TRANSACTIONAL_ID, txn) \
                else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic
        if self.cluster(IDEMPOTENT_WRITE) or self.asker.az.authorize_any(
                self.asker.principal, self.asker.host, WRITE, TOPIC):
            return None
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED

    def _configs(self, op):
        items = self.request.get("resources") or ()
        by_code: dict = {}
        keep = []
        for r in items:
            rtype = CONFIG_RESOURCE.get(r["resource_type"])
            name = CLUSTER_NAME if rtype == CLUSTER else r["resource_name"]
            if rtype is None or self.asker.allowed(op, rtype, name):
                keep.append(r)
            else:
                by_code.setdefault(DENIED_CODE[rtype], []).append(r)
        for code, denied in by_code.items():
            self.request = {**self.request, "resources": keep}
            self.filtered.append("resources")
            self.denied.append(("resources", denied, code))
        return None

    def _describe_configs(self):
        return self._configs(DESCRIBE_CONFIGS)

    def _alter_configs(self):
        return self._configs(ALTER_CONFIGS)

    def listing(self, key: str, rtype: int, field: str) -> None:
        """Drop from the response's `key` list what the principal may not DESCRIBE."""
        ask = self.asker.allowed

        def post(body):
            body[key] = [x for x in body.get(key) or () if ask(DESCRIBE, rtype, x[field])]
            return body
        self.posts.append(post)

    def _list_groups(self):
        if not self.cluster(DESCRIBE):
            self.listing("groups", GROUP, "group_id")
        return None

    def _list_transactions(self):
        self.listing("transaction_states", TRANSACTIONAL_ID, "transactional_id")
        return None
