"""Connection hand-off (workers/handoff.py) between two real routers joined by a real mesh
socket pair, in one loop: the client socket reaches the owner as a working socket of
the same connection, the connection quota moves only once the owner counted it (or its
owner went), its fetch session and the front's copies of what it read go, and a hand-off the channel cannot
take now is not made."""
import asyncio
import socket
import types

from tests.workers.test_txn_fetch import TOPIC, MiniBroker
from workers.connection import Connection
from workers.fetch_session import CachedPartition
from workers.handoff import Handoff
from workers.router import Router


async def until(cond, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


class _Pair:
    """Worker 1 (front) and worker 2 (owner), each a Router over a MiniBroker, with a
    Handoff each: the owner's adopts into `adopted`, both release into `released`."""

    def __init__(self, tmp_path, owner_handoff=True):
        self.brokers = []
        self.routers = {}
        self.adopted, self.released = [], {1: [], 2: []}
        self.handoffs = {}
        for wid in (1, 2):
            b = MiniBroker(tmp_path / f"w{wid}")
            b.worker_id, b.requests_served = wid, 0
            b.placement = types.SimpleNamespace(num_workers=2)
            self.brokers.append(b)
            self.routers[wid] = Router(b, lambda ctx, body: {})
        a, c = socket.socketpair()
        self.routers[1].add_peer(2, a)
        self.routers[2].add_peer(1, c)
        loop = asyncio.get_running_loop()
        for wid, r in self.routers.items():
            r.start(loop)
            if wid == 1 or owner_handoff:
                r.handoff = self.handoffs[wid] = Handoff(
                    r, self._adopt, self.released[wid].append)

    def _adopt(self, sock, msg):
        self.adopted.append((sock, msg))
        return True

    def close(self):
        for r in self.routers.values():
            r.close()
        for b in self.brokers:
            b.close()


def _client(peer_host="127.0.0.1"):
    """A front's Connection over one end of a socket pair, and the client's end."""
    srv, cli = socket.socketpair()
    conn = Connection(srv, None, 1 << 20)
    conn.client_host = conn.quota_host = peer_host
    conn.client_id = "consumer-1"
    conn.metered = True
    conn.bytes_in, conn.bytes_out = 300, 7000
    return conn, srv, cli


def _run(tmp_path, test, owner_handoff=True):
    """`await test(pair, conn, srv, cli)` in a loop, with a `_Pair` and a `_client()`,
    closed afterwards whatever the test closed itself."""
    async def main():
        pair = _Pair(tmp_path, owner_handoff)
        conn, srv, cli = _client()
        try:
            await test(pair, conn, srv, cli)
        finally:
            srv.close()
            cli.close()
            pair.close()
    asyncio.run(main())


def test_the_socket_reaches_the_owner_and_the_quota_moves_once_counted(tmp_path):
    async def test(pair, conn, srv, cli):
        front = pair.routers[1]
        front.states.update(2, [(TOPIC, 0, (1, 1, 0, 0, 9, 9, None))], subscribed=True)
        conn.move_keys = [(TOPIC, 0)]       # what its Fetches read
        sessions = pair.brokers[0].fetch_sessions
        sid = sessions.new_context(0, 0, [CachedPartition(TOPIC, b"\x01" * 16, 0, 0, 100)],
                                   []).session_id
        conn.move_session = sid             # and its fetch session
        assert pair.handoffs[1].move(conn, 2)
        srv.close()             # what the front's Connection does once handed over
        assert front.states.get((TOPIC, 0)) is None     # its copy goes with it
        assert len(sessions) == 0                       # and its session
        assert pair.released[1] == []       # counted here until the owner counted it
        await until(lambda: pair.adopted)
        sock, msg = pair.adopted[0]
        assert msg["op"] == "conn" and msg["host"] == "127.0.0.1"
        assert (msg["listener"], msg["principal"]) == (None, "User:ANONYMOUS")
        assert (msg["client_id"], msg["metered"]) == ("consumer-1", True)
        assert (msg["bytes_in"], msg["bytes_out"]) == (300, 7000)
        assert msg["session"].session_id == sid and list(msg["session"].partitions) == [
            (TOPIC, 0)]
        assert msg["moves"] == 1            # its first: the owner's next takes twice as long
        # the same connection: what the client sends, the owner reads, and back
        cli.sendall(b"next request")
        sock.settimeout(5)
        assert sock.recv(100) == b"next request"
        sock.sendall(b"its answer")
        cli.settimeout(5)
        assert cli.recv(100) == b"its answer"
        await until(lambda: pair.released[1] == ["127.0.0.1"])
        assert conn.quota_host is None          # the front's close releases nothing
        assert (pair.handoffs[1].moved_out, pair.handoffs[2].moved_in) == (1, 1)
        sock.close()
    _run(tmp_path, test)


def test_no_handoff_to_itself_an_unknown_or_busy_worker(tmp_path):
    async def test(pair, conn, srv, cli):
        h = pair.handoffs[1]
        assert not h.move(conn, 1)              # itself
        assert not h.move(conn, 5)              # no such worker
        link = pair.routers[1].peers[2]
        link.out.append(memoryview(b"queued"))  # a channel that does not take writes now
        assert not h.move(conn, 2)
        link.out.clear()
        pair.brokers[0].placement = types.SimpleNamespace(num_workers=1)
        assert not h.move(conn, 2)              # the router is not routing
        assert h.moved_out == 0 and conn.quota_host == "127.0.0.1"
    _run(tmp_path, test)


def test_an_owner_gone_before_counting_releases_the_fronts_count(tmp_path):
    async def test(pair, conn, srv, cli):
        assert pair.handoffs[1].move(conn, 2)
        srv.close()
        pair.routers[1].peers[2].close()        # the owner's channel goes first
        assert pair.released[1] == ["127.0.0.1"]
    _run(tmp_path, test)


def test_an_owner_without_handoff_closes_the_socket_and_answers(tmp_path):
    async def test(pair, conn, srv, cli):
        assert pair.handoffs[1].move(conn, 2)
        srv.close()
        await until(lambda: pair.released[1] == ["127.0.0.1"])
        assert pair.adopted == []
        cli.settimeout(5)
        assert cli.recv(10) == b""              # closed: the client connects again
    _run(tmp_path, test, owner_handoff=False)


def test_an_adoption_that_fails_closes_the_socket_and_still_answers(tmp_path):
    async def test(pair, conn, srv, cli):
        pair.handoffs[2].adopt = lambda sock, msg: False
        assert pair.handoffs[1].move(conn, 2)
        srv.close()
        await until(lambda: pair.released[1] == ["127.0.0.1"])
        cli.settimeout(5)
        assert cli.recv(10) == b""
        assert pair.handoffs[2].moved_in == 0
    _run(tmp_path, test)


def test_no_handoff_to_a_stalled_worker_nor_of_a_connection_an_acks0_failure_may_close(tmp_path):
    async def test(pair, conn, srv, cli):
        h = pair.handoffs[1]
        h.alive = lambda wid: False             # its heartbeat is stale
        assert not h.move(conn, 2)
        h.alive = lambda wid: True
        pair.routers[1].conns[id(conn)] = conn  # it sent a forwarded acks=0 Produce
        assert not h.move(conn, 2)
        del pair.routers[1].conns[id(conn)]
        assert h.move(conn, 2)
    _run(tmp_path, test)
