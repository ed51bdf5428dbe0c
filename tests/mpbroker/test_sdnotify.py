"""sd_notify against a real AF_UNIX datagram socket (a path and an abstract name)."""
from __future__ import annotations

import os
import socket
import tempfile
import uuid

import pytest

from mpbroker import sdnotify


@pytest.fixture
def path_socket():
    d = tempfile.mkdtemp(dir="/tmp")          # short: sun_path holds 108 bytes
    path = os.path.join(d, "notify")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(2)
    yield path, s
    s.close()
    os.unlink(path)
    os.rmdir(d)


@pytest.fixture
def abstract_socket():
    name = f"@mpbroker-sdnotify-{uuid.uuid4().hex}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(b"\0" + name[1:].encode())
    s.settimeout(2)
    yield name, s
    s.close()


def fields(datagram: bytes) -> dict:
    return dict(line.split("=", 1) for line in datagram.decode().split("\n"))


def test_address_forms():
    assert sdnotify.socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert sdnotify.socket_address("@/org/freedesktop/x") == b"\0/org/freedesktop/x"
    assert sdnotify.socket_address(None) is None
    assert sdnotify.socket_address("") is None
    assert sdnotify.socket_address("vsock:2:1234") is None
    assert sdnotify.socket_address("relative/path") is None


def test_path_socket_receives_each_notification_as_one_datagram(path_socket):
    path, server = path_socket
    n = sdnotify.Notifier.from_env({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready(status="serving on 127.0.0.1:9092")
    assert fields(server.recv(4096)) == {"READY": "1", "STATUS": "serving on 127.0.0.1:9092"}
    assert n.watchdog()
    assert server.recv(4096) == b"WATCHDOG=1"
    assert n.status("3/4 workers ready")
    assert server.recv(4096) == b"STATUS=3/4 workers ready"
    assert n.stopping()
    assert server.recv(4096) == b"STOPPING=1"
    assert n.stopping(status="SIGTERM", extend_timeout_usec=155_000_000)
    assert fields(server.recv(4096)) == {"STOPPING": "1", "STATUS": "SIGTERM",
                                         "EXTEND_TIMEOUT_USEC": "155000000"}
    n.close()


def test_abstract_socket_and_reloading_carries_monotonic_usec(abstract_socket):
    name, server = abstract_socket
    n = sdnotify.Notifier.from_env({"NOTIFY_SOCKET": name})
    before = sdnotify.monotonic_usec()
    assert n.reloading()
    got = fields(server.recv(4096))
    assert got["RELOADING"] == "1"
    assert before <= int(got["MONOTONIC_USEC"]) <= sdnotify.monotonic_usec()
    assert n.ready()
    assert server.recv(4096) == b"READY=1"


def test_without_notify_socket_nothing_is_sent():
    n = sdnotify.Notifier.from_env({})
    assert not n.enabled
    assert n.ready() is False and n.watchdog() is False


def test_unreachable_socket_reports_false_and_does_not_raise():
    n = sdnotify.Notifier("/tmp/no-such-dir-%s/notify" % uuid.uuid4().hex)
    assert n.ready() is False


def test_newline_in_a_value_is_refused():
    with pytest.raises(ValueError):
        sdnotify.format_message(STATUS="two\nlines")


def test_watchdog_interval():
    assert sdnotify.watchdog_usec({}) == 0
    assert sdnotify.watchdog_usec({"WATCHDOG_USEC": "30000000"}) == 30_000_000
    assert sdnotify.watchdog_usec({"WATCHDOG_USEC": "5", "WATCHDOG_PID": "42"}, pid=42) == 5
    assert sdnotify.watchdog_usec({"WATCHDOG_USEC": "5", "WATCHDOG_PID": "42"}, pid=43) == 0
    assert sdnotify.watchdog_usec({"WATCHDOG_USEC": "junk"}) == 0
