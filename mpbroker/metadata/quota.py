"""KIP-599 controller mutation quotas: partitions created or deleted per second. No I/O.

One ``MutationQuotas`` lives in the controller process (so that a client's rate is
counted once per broker, whichever worker took its connections). Each quota key (the
request's client id; the user is always ANONYMOUS until authentication exists) has a
token bucket, Kafka's ``TokenBucket``:

* K tokens, at most the burst B = rate * ``controller.quota.window.num`` *
  ``controller.quota.window.size.seconds``; a new bucket is full;
* before each use K = min(B, K + rate * seconds since the last update);
* strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a topic's N
  partition mutations are admitted iff K >= 0, then K -= N (K may go negative: one
  topic is never split); a topic that is not admitted answers
  THROTTLING_QUOTA_EXCEEDED and nothing of it is done;
* permissive (older versions, and Metadata auto-creation): everything is admitted and
  counted;
* the throttle time is -K / rate seconds while K < 0, else 0 (strict: only once a
  topic was refused); it goes in the response's ``throttle_time_ms`` (versions before
  KIP-219 are also answered that much later, workers/handlers/_quota.py). A rate of 0
  admits one mutation and then refuses, with a throttle time of one quota window.

The rate is ``controller.mutation.rate`` (mpbroker's broker-level default of Kafka's
``controller_mutation_rate`` client quota; the default, Double.MAX, is no quota).
Buckets that have refilled are dropped, so memory is bounded by the clients that are
in debt. ``MutationResults`` is the list a controller mutation returns, carrying the
request's throttle time to the handler.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional

__all__ = ["MutationQuotas", "MutationQuota", "MutationResults", "UNLIMITED",
           "THROTTLING_QUOTA_EXCEEDED", "THROTTLING_MESSAGE", "STRICT_SINCE"]

UNLIMITED = 1.7976931348623157e308       # Double.MAX_VALUE: no quota
THROTTLING_QUOTA_EXCEEDED = 89
THROTTLING_MESSAGE = "The throttling quota has been exceeded."
# api key -> first version that knows THROTTLING_QUOTA_EXCEEDED (strict quota)
STRICT_SINCE = {19: 6, 37: 3, 20: 5}     # CreateTopics, CreatePartitions, DeleteTopics
_SWEEP_AT = 1024                         # buckets kept before full ones are dropped


class MutationResults(list):
    """A controller mutation's per-topic results plus ``throttle_time_ms`` (pickles
    across the controller channel like the plain list it is)."""

    throttle_time_ms = 0


class _Bucket:
    __slots__ = ("tokens", "last_ms")

    def __init__(self, tokens: float, now_ms: int):
        self.tokens = tokens
        self.last_ms = now_ms


class MutationQuota:
    """One request's view of its client's bucket (Kafka's Strict/Permissive
    ControllerMutationQuota)."""

    def __init__(self, quotas: "MutationQuotas", key: Optional[str], strict: bool):
        self.quotas = quotas
        self.key = key
        self.strict = strict
        self.violated = False

    @property
    def enabled(self) -> bool:
        return self.key is not None and self.quotas.enabled

    def try_record(self, mutations: int) -> bool:
        """Admit ``mutations`` (count them) or, strict and over quota, refuse them."""
        if not self.enabled:
            return True
        b = self.quotas._bucket(self.key)
        if self.strict and b.tokens < 0:
            self.violated = True
            return False
        b.tokens -= mutations
        return True

    def throttle_time_ms(self) -> int:
        """Strict: the time until the bucket is back to zero when something was refused,
        else 0; permissive: that time whenever the bucket is in debt (Kafka records
        first and reports the violation after)."""
        if not self.enabled or (self.strict and not self.violated):
            return 0
        return self.quotas.throttle_time_ms(self.key)


class MutationQuotas:
    def __init__(self, rate: float = UNLIMITED, window_num: int = 11, window_size_s: int = 1,
                 clock: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.clock = clock
        self.buckets: Dict[str, _Bucket] = {}
        self.rate = UNLIMITED
        self.window_s = window_num * window_size_s
        self.configure(rate)

    @property
    def enabled(self) -> bool:
        return self.rate < UNLIMITED

    @property
    def burst(self) -> float:
        return self.rate * self.window_s

    def configure(self, rate: float, window_num: Optional[int] = None,
                  window_size_s: Optional[int] = None) -> None:
        """A new rate (AlterConfigs of controller.mutation.rate) applies to the buckets
        as they are; back to no quota forgets them."""
        if window_num is not None and window_size_s is not None:
            self.window_s = window_num * window_size_s
        self.rate = float(rate)
        if not self.enabled:
            self.buckets.clear()

    def quota(self, client_id: Optional[str], strict: bool) -> MutationQuota:
        """The quota of one request; ``client_id`` None is no quota (the controller's
        own work, e.g. internal topics)."""
        return MutationQuota(self, None if client_id is None else str(client_id), strict)

    def _refill(self, b: _Bucket, now: int) -> None:
        if now > b.last_ms:
            b.tokens = min(self.burst, b.tokens + self.rate * (now - b.last_ms) / 1000)
            b.last_ms = now
        elif b.tokens > self.burst:     # the rate went down
            b.tokens = self.burst

    def _bucket(self, key: str) -> _Bucket:
        now = self.clock()
        b = self.buckets.get(key)
        if b is None:
            if len(self.buckets) >= _SWEEP_AT:
                self._sweep(now)
            b = self.buckets[key] = _Bucket(self.burst, now)
        self._refill(b, now)
        return b

    def _sweep(self, now: int) -> None:
        for key in list(self.buckets):
            b = self.buckets[key]
            self._refill(b, now)
            if b.tokens >= self.burst:
                del self.buckets[key]

    def tokens(self, client_id: str) -> float:
        """The client's tokens now (a full bucket for one never seen)."""
        b = self.buckets.get(str(client_id))
        if b is None:
            return self.burst
        self._refill(b, self.clock())
        return b.tokens

    def throttle_time_ms(self, client_id: Optional[str]) -> int:
        if client_id is None or not self.enabled:
            return 0
        k = self.tokens(client_id)
        if k >= 0:
            return 0
        if self.rate <= 0:           # no tokens ever come back: one window, then ask again
            return int(self.window_s * 1000)
        return int(round(-k / self.rate * 1000))
