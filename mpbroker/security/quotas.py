"""Client quotas (KIP-13 byte rates, KIP-55 user quotas, KIP-124 request percentage,
KIP-546 AlterClientQuotas / DescribeClientQuotas): entities, validation, Kafka's
resolution order, sampled rates and throttle times. Pure: no I/O, an injected clock.

Entities. A quota entity is one or two (type, name) pairs, types ``user`` and
``client-id``; a name of None is the type's default (``<default>`` in ZooKeeper
paths and on the command line). ``EntityKey`` is the pairs sorted by type, e.g.
``(("client-id", "app"), ("user", None))``. Stored quotas are ``{EntityKey:
{key: float}}`` (the metadata's ``client_quotas``). Keys (Kafka's QuotaConfigs):
``producer_byte_rate`` and ``consumer_byte_rate`` (bytes/s, whole numbers),
``request_percentage`` (KIP-124: percent of one request handler thread's time) and
``controller_mutation_rate`` (KIP-599: partition mutations/s; counted by the
controller's token bucket, mpbroker/metadata/quota.py, resolved per entity here).

Resolution (Kafka's DefaultQuotaCallback), per key, the first level that sets it::

    1 /config/users/<user>/clients/<client-id>     sensor shared by (user, client-id)
    2 /config/users/<user>/clients/<default>       (user, client-id)
    3 /config/users/<user>                         (user, "")   all the user's clients
    4 /config/users/<default>/clients/<client-id>  (user, client-id)
    5 /config/users/<default>/clients/<default>    (user, client-id)
    6 /config/users/<default>                      (user, "")
    7 /config/clients/<client-id>                  ("", client-id)
    8 /config/clients/<default>                    ("", client-id)

The second column is the metric key: who shares one rate. With no level setting the
key there is no quota.

Rates (Kafka's Rate over a SampledStat): ``quota.window.num`` samples of
``quota.window.size.seconds`` each. A record goes into the current sample, a new one
(the oldest reused) once the current is a window old; samples older than num * size
are reset before a measure; the rate is the samples' sum over the elapsed time since
the oldest sample started, counted as at least (num - 1) full windows (so one burst
after a quiet period is not measured over a few milliseconds).

Throttle (Kafka's QuotaUtils.throttleTime): after recording, if the rate R exceeds the
quota Q, the client waits ``(R - Q) / Q * window`` ms (window: the elapsed time the
rate was measured over), which brings the rate back to Q; capped at one whole quota
window (num * size seconds), ``max_throttle_ms``.
"""
from __future__ import annotations

import math
from urllib.parse import quote, unquote
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (CLIENT_ID, USER)          # sorted: EntityKey order
DEFAULT_NAME = "<default>"                # ZooKeeper's and the CLI's spelling of None

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# key -> whole numbers only (Kafka's LONG type) or any double
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True,
              REQUEST_PERCENTAGE: False, CONTROLLER_MUTATION_RATE: False}

# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

EntityKey = Tuple[Tuple[str, Optional[str]], ...]
Quotas = Mapping[EntityKey, Mapping[str, float]]
MetricKey = Tuple[str, str]               # (user tag, client-id tag), Kafka's sensor tags


class QuotaError(ValueError):
    """An invalid entity, filter or value: Kafka answers INVALID_REQUEST with ``str(e)``."""


# ------------------------------------------------------------------ entities
def entity_key(pairs: Iterable[Tuple[str, Optional[str]]]) -> EntityKey:
    """The EntityKey of (type, name) pairs as a request gives them; raises QuotaError."""
    seen: Dict[str, Optional[str]] = {}
    for etype, name in pairs:
        if etype not in ENTITY_TYPES:
            raise QuotaError(f"Unhandled client quota entity type: {etype}")
        if etype in seen:
            raise QuotaError(f"Duplicate {etype} entity type in client quota entity")
        if name is not None and name == "":
            raise QuotaError(f"Empty {etype} name is not allowed in a client quota entity")
        seen[etype] = name
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    return tuple(sorted(seen.items()))


def entity_pairs(key: EntityKey) -> List[Tuple[str, Optional[str]]]:
    return list(key)


def zk_path(key: EntityKey) -> str:
    """The entity's ZooKeeper config path below /config, Kafka's layout:
    ``users/<u>``, ``clients/<c>``, ``users/<u>/clients/<c>`` (None as <default>)."""
    d = dict(key)
    name = lambda n: DEFAULT_NAME if n is None else sanitize(n)      # noqa: E731
    if USER in d and CLIENT_ID in d:
        return f"users/{name(d[USER])}/clients/{name(d[CLIENT_ID])}"
    if USER in d:
        return f"users/{name(d[USER])}"
    return f"clients/{name(d[CLIENT_ID])}"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a name as a ZooKeeper node name (URL-encoded UTF-8,
    as Java's URLEncoder with "*" and space as %2A and %20; "." "-" "_" kept)."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote(name)


def from_zk_path(path: str) -> EntityKey:
    """The inverse of ``zk_path`` (raises QuotaError on another layout)."""
    parts = path.strip("/").split("/")
    if parts and parts[0] == "config":
        parts = parts[1:]
    name = lambda n: None if n == DEFAULT_NAME else desanitize(n)      # noqa: E731
    if len(parts) == 2 and parts[0] == "users":
        return ((USER, name(parts[1])),)
    if len(parts) == 2 and parts[0] == "clients":
        return ((CLIENT_ID, name(parts[1])),)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return ((CLIENT_ID, name(parts[3])), (USER, name(parts[1])))
    raise QuotaError(f"not a client quota path: {path}")


def user_name(principal: str) -> str:
    """The user part of a principal string ("User:alice" -> "alice")."""
    _, sep, name = principal.partition(":")
    return name if sep else principal


# ------------------------------------------------------------------ validation
def validate_value(key: str, value: float) -> float:
    if key not in QUOTA_KEYS:
        raise QuotaError(f"Invalid configuration key {key}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise QuotaError(f"Configuration {key} must be a number")
    if value <= 0:
        raise QuotaError(f"Configuration {key} must be greater than 0")
    if QUOTA_KEYS[key] and abs(round(value) - value) > 1e-6:
        raise QuotaError(f"Configuration {key} must be a Long value")
    return float(value)


def alter(quotas: Quotas, key: EntityKey, ops: Iterable[Tuple[str, float, bool]]
          ) -> Dict[EntityKey, Dict[str, float]]:
    """``quotas`` with one entity's ops applied ((key, value, remove) each; validated
    first, so a bad op changes nothing). An entity left with no key is dropped."""
    current = dict(quotas.get(key, {}))
    ops = list(ops)
    seen = set()
    for k, value, remove in ops:
        if k in seen:
            raise QuotaError(f"Duplicate quota key {k} in the request")
        seen.add(k)
        if remove:
            if k not in QUOTA_KEYS:
                raise QuotaError(f"Invalid configuration key {k}")
        else:
            validate_value(k, value)
    for k, value, remove in ops:
        if remove:
            current.pop(k, None)
        else:
            current[k] = float(value)
    out = {e: dict(v) for e, v in quotas.items()}
    if current:
        out[key] = current
    else:
        out.pop(key, None)
    return out


# ------------------------------------------------------------------ describe
def check_filter(components: Iterable[Tuple[str, int, Optional[str]]]) -> list:
    """DescribeClientQuotas components ((type, match type, match)) checked as Kafka does."""
    out, seen = [], set()
    for etype, match_type, match in components:
        if etype not in ENTITY_TYPES:
            raise QuotaError(f"Custom entity type {etype} not supported")
        if etype in seen:
            raise QuotaError(f"Duplicate entity type in filter: {etype}")
        seen.add(etype)
        if match_type == MATCH_EXACT and match is None:
            raise QuotaError(f"Exact match for {etype} requires a name")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaError(f"Unknown match type {match_type}")
        out.append((etype, match_type, match))
    return out


def describe(quotas: Quotas, components, strict: bool) -> List[Tuple[EntityKey, Dict[str, float]]]:
    """The stored entities matching the filter: each component's type must be in the
    entity (exact name, the default, or any non-default name); strict: and no other."""
    comps = check_filter(components)
    out = []
    for key in sorted(quotas, key=lambda k: [(t, n or "") for t, n in k]):
        d = dict(key)
        if strict and len(d) != len(comps):
            continue
        ok = True
        for etype, match_type, match in comps:
            if etype not in d:
                ok = False
            elif match_type == MATCH_EXACT:
                ok = d[etype] == match
            elif match_type == MATCH_DEFAULT:
                ok = d[etype] is None
            else:
                ok = d[etype] is not None
            if not ok:
                break
        if ok:
            out.append((key, dict(quotas[key])))
    return out


# ------------------------------------------------------------------ resolution
def resolve(quotas: Quotas, user: str, client_id: str, key: str
            ) -> Tuple[Optional[float], MetricKey]:
    """(the quota of ``key`` for this user and client id or None, the metric key that
    shares its rate), Kafka's eight levels (module docstring)."""
    if not quotas:
        return None, ("", "")
    levels = (
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    )
    for entity, metric in levels:
        v = quotas.get(entity)
        if v is not None and key in v:
            return v[key], metric
    return None, ("", "")


# ------------------------------------------------------------------ rates
class Rate:
    """Kafka's Rate over a SampledStat (module docstring); times in ms."""

    __slots__ = ("num", "window_ms", "starts", "values", "current")

    def __init__(self, num: int, window_ms: int, now_ms: int):
        self.num = max(2, num)        # Kafka's SampledStat keeps at least two samples
        self.window_ms = window_ms
        self.starts = [now_ms] + [None] * (self.num - 1)
        self.values = [0.0] * self.num
        self.current = 0

    def record(self, value: float, now_ms: int) -> None:
        i = self.current
        if now_ms - self.starts[i] >= self.window_ms:
            i = self.current = (i + 1) % self.num
            self.starts[i] = now_ms
            self.values[i] = 0.0
        self.values[i] += value

    def _purge(self, now_ms: int) -> None:
        horizon = now_ms - self.num * self.window_ms
        for i, start in enumerate(self.starts):
            if start is not None and start < horizon and i != self.current:
                self.starts[i] = None
                self.values[i] = 0.0
        if self.starts[self.current] < horizon:      # a quiet period: start afresh
            self.starts[self.current] = now_ms
            self.values[self.current] = 0.0

    def window_size(self, now_ms: int) -> int:
        """The elapsed ms the rate is measured over (Kafka's Rate.windowSize)."""
        self._purge(now_ms)
        oldest = min(s for s in self.starts if s is not None)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        """Per second."""
        size = self.window_size(now_ms)
        return sum(self.values) / (size / 1000.0)


def throttle_time_ms(rate: Rate, quota: float, now_ms: int, max_ms: int) -> int:
    """0 when the rate is within ``quota``, else Kafka's (R - Q) / Q * window, capped."""
    window = rate.window_size(now_ms)
    observed = sum(rate.values) / (window / 1000.0)
    if observed <= quota:
        return 0
    if quota <= 0:
        return max_ms
    ms = (observed - quota) / quota * window
    return int(min(max_ms, round(ms)))


class Sensors:
    """The rates of one quota type in one process, per metric key; rates idle for a
    whole quota window are dropped when the table grows (Kafka expires idle sensors)."""

    SWEEP_AT = 4096

    def __init__(self, num: int = 11, window_s: int = 1,
                 clock: Callable[[], int] = None):
        self.num, self.window_ms = num, window_s * 1000
        self.clock = clock
        self.rates: Dict[tuple, Rate] = {}

    @property
    def max_throttle_ms(self) -> int:
        return self.num * self.window_ms

    def record(self, metric: tuple, value: float, quota: float, now_ms: int) -> int:
        """Record ``value`` for ``metric``; the throttle time under ``quota``."""
        r = self.rates.get(metric)
        if r is None:
            if len(self.rates) >= self.SWEEP_AT:
                self._sweep(now_ms)
            r = self.rates[metric] = Rate(self.num, self.window_ms, now_ms)
        r.record(value, now_ms)
        return throttle_time_ms(r, quota, now_ms, self.max_throttle_ms)

    def _sweep(self, now_ms: int) -> None:
        horizon = now_ms - self.num * self.window_ms
        for m in [m for m, r in self.rates.items()
                  if max(s for s in r.starts if s is not None) < horizon]:
            del self.rates[m]
