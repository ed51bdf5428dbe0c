"""systemd's service notification protocol (sd_notify(3)), written against the protocol.

The service manager passes the address of an AF_UNIX datagram socket in the environment
variable `NOTIFY_SOCKET`:

* a filesystem path (`/run/systemd/notify`), or
* an abstract-namespace name written with a leading `@` (`@/org/freedesktop/...`): the
  address is the name with the `@` replaced by a NUL byte.

A notification is one datagram of newline-separated `KEY=VALUE` assignments, UTF-8:

    READY=1                   startup finished (Type=notify units leave "activating")
    STATUS=free text          shown by `systemctl status`
    WATCHDOG=1                keep-alive ping, at least every WatchdogSec
    RELOADING=1               a reload began; READY=1 ends it. MONOTONIC_USEC=<CLOCK_MONOTONIC
                              in microseconds> goes with it (required by Type=notify-reload)
    STOPPING=1                shutdown began
    EXTEND_TIMEOUT_USEC=<usec>  (systemd >= 236) the current state (here: stopping) may
                              go on this long from now, even past TimeoutStopSec; it
                              never shortens the unit's timeout
    MAINPID=<pid>             the service's main process, when it is not the sender

The watchdog interval comes in `WATCHDOG_USEC` (microseconds); `WATCHDOG_PID`, when set,
names the one process that the interval is meant for. Without `NOTIFY_SOCKET` every call
is a no-op that returns False (the broker runs the same without systemd). Sending never
raises: a lost notification must not stop the broker, so errors are logged and reported
as False.

Only the supervisor talks to systemd (the unit says NotifyAccess=main); children drop
`NOTIFY_SOCKET` from their environment right after the fork.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from typing import Mapping

log = logging.getLogger(__name__)

ENV_SOCKET = "NOTIFY_SOCKET"
ENV_WATCHDOG_USEC = "WATCHDOG_USEC"
ENV_WATCHDOG_PID = "WATCHDOG_PID"


def socket_address(value: str | None) -> str | bytes | None:
    """`NOTIFY_SOCKET` -> an address for sendto: a path, or bytes for the abstract namespace.

    None where the value is unset, empty, or of a kind this module does not speak
    (`vsock:` addresses of VMs, relative paths)."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


def format_message(**fields) -> bytes:
    """format_message(READY=1, STATUS="serving") -> b"READY=1\\nSTATUS=serving".

    Values may not contain a newline: that would start a new assignment."""
    lines = []
    for key, value in fields.items():
        text = str(value)
        if "\n" in text:
            raise ValueError(f"sd_notify value for {key} contains a newline")
        lines.append(f"{key}={text}")
    return "\n".join(lines).encode()


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def watchdog_usec(environ: Mapping[str, str] | None = None, pid: int | None = None) -> int:
    """The watchdog interval meant for this process in microseconds, 0 when none."""
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get(ENV_WATCHDOG_USEC, "0"))
    except ValueError:
        return 0
    owner = env.get(ENV_WATCHDOG_PID)
    if owner:
        try:
            if int(owner) != (os.getpid() if pid is None else pid):
                return 0
        except ValueError:
            return 0
    return max(usec, 0)


class Notifier:
    """One connectionless sender for the life of the process."""

    def __init__(self, address: str | bytes | None):
        self.address = address
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Notifier":
        env = os.environ if environ is None else environ
        return cls(socket_address(env.get(ENV_SOCKET)))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, **fields) -> bool:
        if self.address is None:
            return False
        data = format_message(**fields)
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(data, self.address)
            return True
        except OSError as e:
            log.warning("sd_notify %r to %r failed: %s", data, self.address, e)
            return False

    def ready(self, status: str | None = None) -> bool:
        return self.notify(READY=1, **({"STATUS": status} if status else {}))

    def status(self, text: str) -> bool:
        return self.notify(STATUS=text)

    def watchdog(self) -> bool:
        return self.notify(WATCHDOG=1)

    def reloading(self) -> bool:
        return self.notify(RELOADING=1, MONOTONIC_USEC=monotonic_usec())

    def stopping(self, status: str | None = None, extend_timeout_usec: int | None = None) -> bool:
        fields = {"STOPPING": 1}
        if status:
            fields["STATUS"] = status
        if extend_timeout_usec:
            fields["EXTEND_TIMEOUT_USEC"] = int(extend_timeout_usec)
        return self.notify(**fields)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
