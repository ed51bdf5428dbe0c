"""Connection quotas per broker: `max.connections`, `max.connections.per.ip` and
`max.connections.per.ip.overrides` (Kafka's ConnectionQuotas), counted across workers.

Each worker sees only the connections the kernel gave to it (SO_REUSEPORT), but Kafka's
limits are per broker. So the counts live in shared anonymous memory (`ConnectionTable`,
MAP_SHARED, made by the supervisor before any fork, like the heartbeat table), one
region per worker, each written only by its worker (the supervisor zeroes a region
before it forks the worker that owns it, so a dead worker's counts go with it):

    region  = total int64 | IP_SLOTS x entry
    entry   = address 16 bytes (IPv4 as ::ffff:a.b.c.d; all zero: never used) | count int64

A worker finds an address by open addressing from a hash of it; keys are never cleared
(an entry whose count fell to 0 may be taken over by another address), so a reader
probing for an address stops at the first never-used entry. Readers of the other
regions take no lock: a count is one aligned 8-byte word (read whole), and a worker
publishes its own increment before it reads the others' (increment, then check): two
workers racing for the last slot may both refuse, never both admit.
When a worker's region has no free entry (more than IP_SLOTS distinct addresses
connected to one worker at once) a new address is counted by that worker only.

`ConnectionQuotas` is one worker's view: `admit(host)` on accept, `release(host)` on
close. The broker-wide limit makes the caller wait (Kafka's acceptor blocks until a
slot frees; connections queue in the listen backlog); the per-address limit refuses
(`TooManyConnections`: the caller closes the socket, as Kafka does). The limits are
read from the broker's config on each accept, so dynamic updates apply to new
connections. Without a table (a worker run on its own) the counts are the worker's.
"""
from __future__ import annotations

import ipaddress
import logging
import mmap
import socket
import struct
import zlib

log = logging.getLogger(__name__)

IP_SLOTS = 16384
_TOTAL = struct.Struct("<q")
_ENTRY = struct.Struct("<16sq")
_COUNT = struct.Struct("<q")
REGION = _TOTAL.size + IP_SLOTS * _ENTRY.size
_NEVER_USED = bytes(16)
INT_MAX = 2**31 - 1


class TooManyConnections(Exception):
    """Kafka's TooManyConnectionsException: the address has its maximum already."""

    def __init__(self, host: str, limit: int):
        super().__init__(f"Too many connections from {host} (maximum = {limit})")
        self.host, self.limit = host, limit


def address_key(host: str) -> bytes:
    """16 bytes naming `host` (an IP literal); IPv4 as its IPv4-mapped IPv6 form."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return zlib.crc32(host.encode()).to_bytes(4, "big").rjust(16, b"\xfe")
    if ip.version == 4:
        return b"\x00" * 10 + b"\xff\xff" + ip.packed
    return ip.packed


def parse_overrides(raw: str | None, resolve=socket.getaddrinfo) -> dict[bytes, int]:
    """`max.connections.per.ip.overrides`: "host:count,host:count" (IPv6 in brackets or
    bare, the count after the last colon); a host name is resolved once, to all its
    addresses, as Kafka resolves it. Raises ValueError on a malformed entry."""
    out: dict[bytes, int] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().lstrip("-").isdigit():
            raise ValueError(f"Invalid value {item} in max.connections.per.ip.overrides: "
                             "expected host:count")
        n = int(count)
        try:
            ipaddress.ip_address(host)
            hosts = [host]
        except ValueError:
            hosts = sorted({ai[4][0] for ai in resolve(host, None, 0, socket.SOCK_STREAM)})
        for h in hosts:
            out[address_key(h)] = n
    return out


class ConnectionTable:
    """The shared counts of every worker (see the module docstring)."""

    def __init__(self, workers: int):
        self.workers = workers
        self.map = mmap.mmap(-1, REGION * workers)

    def reset(self, worker: int) -> None:
        """Zero `worker`'s region (the supervisor, before forking that worker)."""
        base = REGION * worker
        self.map[base:base + REGION] = bytes(REGION)

    def total(self) -> int:
        return sum(_TOTAL.unpack_from(self.map, REGION * w)[0] for w in range(self.workers))

    def count(self, key: bytes, skip: int = -1) -> int:
        """Connections from `key` on every worker but `skip`."""
        n = 0
        for w in range(self.workers):
            if w != skip:
                n += self._find(w, key)
        return n

    def _find(self, worker: int, key: bytes) -> int:
        base = REGION * worker + _TOTAL.size
        i = _slot(key)
        for _ in range(IP_SLOTS):
            k, c = _ENTRY.unpack_from(self.map, base + i * _ENTRY.size)
            if k == key:
                return c
            if k == _NEVER_USED:
                return 0
            i = (i + 1) % IP_SLOTS
        return 0


def _slot(key: bytes) -> int:
    return zlib.crc32(key) % IP_SLOTS


class ConnectionQuotas:
    """One worker's side of the broker's connection limits."""

    def __init__(self, config, table: ConnectionTable | None = None, worker: int = 0):
        self.config = config        # callable -> the current broker config
        self.table = table
        self.worker = worker
        self.total = 0
        self.by_key: dict[bytes, int] = {}        # key -> this worker's connections
        self._index: dict[bytes, int] = {}        # key -> its entry in our region
        self._owner: dict[int, bytes] = {}        # entry -> key
        self._overrides_raw: str | None = None
        self._overrides: dict[bytes, int] = {}

    # ---------------------------------------------------------------- limits
    def _limits(self) -> tuple[int, int, dict[bytes, int]]:
        cfg = self.config()
        raw = cfg.get("max.connections.per.ip.overrides") or ""
        if raw != self._overrides_raw:
            try:
                self._overrides = parse_overrides(raw)
            except (ValueError, OSError) as e:
                log.warning("ignoring max.connections.per.ip.overrides: %s", e)
                self._overrides = {}
            self._overrides_raw = raw
        return (_int(cfg.get("max.connections"), INT_MAX),
                _int(cfg.get("max.connections.per.ip"), INT_MAX), self._overrides)

    def broker_total(self) -> int:
        return self.total if self.table is None else self.table.total()

    def slot_available(self) -> bool:
        """Whether `max.connections` leaves room for one more connection."""
        return self.broker_total() < self._limits()[0]

    # ---------------------------------------------------------------- admit/release
    def admit(self, host: str) -> bool:
        """Count a new connection from `host`. False: the broker is at `max.connections`
        (nothing counted; wait for a slot and call again). Raises TooManyConnections when
        `host` is at its limit (nothing counted; close the socket)."""
        max_total, max_ip, overrides = self._limits()
        key = address_key(host)
        self._add(key, 1)                               # publish first, then check
        if self.broker_total() > max_total:
            self._add(key, -1)
            return False
        limit = overrides.get(key, max_ip)
        if self._ip_count(key) > limit:
            self._add(key, -1)
            raise TooManyConnections(host, limit)
        return True

    def adopt(self, host: str) -> None:
        """Count a connection admitted by another worker and handed to this one
        (workers/handoff.py): no limit is checked."""
        self._add(address_key(host), 1)

    def release(self, host: str) -> None:
        self._add(address_key(host), -1)

    def ip_count(self, host: str) -> int:
        return self._ip_count(address_key(host))

    def _ip_count(self, key: bytes) -> int:
        own = self.by_key.get(key, 0)
        if self.table is None:
            return own
        return own + self.table.count(key, skip=self.worker)

    def _add(self, key: bytes, delta: int) -> None:
        n = self.by_key.get(key, 0) + delta
        if n > 0:
            self.by_key[key] = n
        else:
            self.by_key.pop(key, None)
            n = 0
        self.total += delta
        if self.table is None:
            return
        base = REGION * self.worker
        idx = self._index.get(key)
        if idx is None and n > 0:
            idx = self._claim(key)
        if idx is not None:
            _COUNT.pack_into(self.table.map, base + _TOTAL.size + idx * _ENTRY.size + 16, n)
        _TOTAL.pack_into(self.table.map, base, self.total)

    def _claim(self, key: bytes) -> int | None:
        """An entry of our region for `key`: a never-used one or one whose count is 0."""
        base = REGION * self.worker + _TOTAL.size
        i = _slot(key)
        for _ in range(IP_SLOTS):
            old = self._owner.get(i)
            if old is None or self.by_key.get(old, 0) == 0:
                if old is not None:
                    del self._index[old]
                _ENTRY.pack_into(self.table.map, base + i * _ENTRY.size, key, 0)
                self._owner[i] = key
                self._index[key] = i
                return i
            i = (i + 1) % IP_SLOTS
        return None


def _int(value, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default
