"""Connection hand-off: a client connection whose Fetches or Produce requests go only to
another worker's partitions moves to that worker (ARCHITECTURE §2, "Connection
hand-off").

The kernel gives a connection to an arbitrary worker (SO_REUSEPORT), its front. A
consumer's Fetch connection (librdkafka's per-broker connection, a Java consumer's)
often reads partitions that are all one other worker's; served from the front, each of
its long polls costs a mesh hop or a published-state copy, and every append to those
partitions a "state" message to the front. A producer to a topic of one partition (or
one pinned to a worker) pays a mesh hop per request. So once a connection's requests
went whole to worker W one after the other, weighing 24 (`MOVE_AT`, workers/connection.py:
a Fetch 8, a Produce 1, so 3 Fetches or 24 Produce requests; a producer whose requests
spread over the workers at random almost never sends 24 in a row to one), the front
hands the socket itself to W between two requests, and W serves the connection from
then on as if it had accepted it: those requests are local. Each move doubles the
streak the connection's next move takes (`Connection.moved_before`): a client whose
requests go to one worker for a while, then to another (the Java producer's sticky
partitioner), settles instead of following them.

Who moves, and when: only a plaintext connection without SASL (nothing of its security
state lives in this process but its listener name); consumer Fetches and Produce
requests with acks other than 0 count (a Fetch or Produce of another shape ends the
streak; other requests, Metadata or a coordinator's, leave it as it is); an
incremental fetch session (KIP-227: kafka-python's, the Java client's) goes with its
connection (`FetchSessionCache.take`/`adopt`: kept by the owner when its id is free
there and its cache has room, else the client's next incremental Fetch is answered
FETCH_SESSION_ID_NOT_FOUND and it starts a new session, as after an eviction); only
when nothing of the connection is in this process: no request read or unanswered, no answer unsent, not throttled nor
muted (`Connection._move`). The bytes the client sends meanwhile wait in the socket,
which W reads. A hand-off that cannot be made now (W's channel busy or gone) leaves the
connection where it is, to be tried after the next streak; so does an owner whose
heartbeat is stale (a stalled worker gets no new clients, as it gets no new
connections from the kernel) and a connection that sent a forwarded acks=0 Produce
(whose failure closes the connection from here). The front's copies of the state of
the partitions the connection read (workers/partition_states.py) are dropped at the
move, except those a Fetch parked here or a part in flight still uses
(`Router.forget_states`), so their owner stops telling the front of every append; a
consumer here that reads them later asks the owner again.

Mesh messages (workers/router.py hands them here):

    front -> owner  {"op": "conn", "id", "listener", "principal", "host", "client_id",
                     "metered", "bytes_in", "bytes_out", "session", "moves"}   the
                    socket's fd rides on the frame (SCM_RIGHTS; the mesh channels take
                    file descriptors); "session": its FetchSession (pickled) or None;
                    "moves": how many hand-offs it has made, this one included
    owner -> front  {"op": "adopted", "id"}   the owner counted the connection

Connection quotas (workers/connection_quotas.py): the owner counts the connection
without checking the limits (it was admitted already), then answers "adopted", on which
the front stops counting it: the broker's count is one over while the socket is in
flight, never one under. A front whose owner goes before answering stops counting its
connections in flight then (the kernel closes a socket whose fd was never received).

Who owns what: the front's `Handoff` sends and the owner's adopts, both in the worker's
loop; `WorkerServer.adopt` makes the connection.
"""
from __future__ import annotations

import logging
import os
import socket
from typing import Callable

log = logging.getLogger(__name__)


class Handoff:
    """One worker's side of connection hand-off. `adopt(sock, msg)`: make a connection
    of a received socket (WorkerServer.adopt; False when it cannot); `release(host)`:
    stop counting a connection of `host` (ConnectionQuotas.release); `alive(worker)`:
    whether that worker's loop turns (its heartbeat is fresh: mpbroker/heartbeats.py)."""

    def __init__(self, router, adopt: Callable, release: Callable[[str], None],
                 alive: Callable[[int], bool] = lambda wid: True):
        self.router = router
        self.adopt = adopt
        self.release = release
        self.alive = alive
        self._moving: dict[int, tuple[str, int]] = {}   # id -> (quota host, owner)
        self._next_id = 0
        self.moved_out = 0          # connections handed to other workers
        self.moved_in = 0           # connections taken from other workers

    # ------------------------------------------------------------ front side
    def move(self, conn, wid: int) -> bool:
        """Send `conn`'s socket to worker `wid` (for WorkerServer._move, the connection's
        `on_move`); True once sent, the connection then no longer counted nor served
        here. False: it stays."""
        router = self.router
        if not router.active or wid == router.me:
            return False
        if id(conn) in router.conns:
            return False        # an acks=0 Produce's failure may still have to close it here
        link = router.peers.get(wid)
        if link is None or link.closed or link.out:
            return False        # a busy channel would block the send of the fd
        if not self.alive(wid):
            return False        # stalled: not given clients it cannot serve
        link.write_batched()
        if link.out or link.closed:
            return False
        self._next_id += 1
        mid = self._next_id
        sessions = router.broker.fetch_sessions
        session = sessions.sessions.get(conn.move_session) if conn.move_session else None
        msg = {"op": "conn", "id": mid, "listener": conn.listener_name,
               "principal": conn.principal, "host": conn.client_host,
               "client_id": conn.__dict__.get("client_id"),
               "metered": "metered" in conn.__dict__,
               "bytes_in": conn.bytes_in, "bytes_out": conn.bytes_out, "session": session,
               "moves": conn.moves + 1}
        try:
            link.send(msg, fds=[conn.fd])
        except (ConnectionError, OSError) as e:
            log.debug("hand-off of %s to worker %d not made: %s", conn.client_host, wid, e)
            return False
        # sent: the socket is the owner's whatever happens below
        host = conn.quota_host
        if host is not None:
            conn.quota_host = None          # released when the owner has counted it
            self._moving[mid] = (host, wid)
        self.moved_out += 1
        try:
            if session is not None:
                sessions.take(session.session_id)       # the owner's from now on
            # what this worker copied of those partitions' state for it goes now
            router.forget_states(wid, conn.move_keys)
        except Exception:       # a bug of ours: the copies go with the next sweep
            log.exception("after handing %s to worker %d", conn.client_host, wid)
        log.debug("handed %s to worker %d: its requests go to that worker's partitions",
                  conn.client_host, wid)
        return True

    def adopted(self, msg: dict) -> None:
        entry = self._moving.pop(msg.get("id"), None)
        if entry is not None:
            self.release(entry[0])

    def peer_gone(self, wid: int) -> None:
        for mid, (host, owner) in list(self._moving.items()):
            if owner == wid:
                del self._moving[mid]
                self.release(host)

    # ------------------------------------------------------------ owner side
    def received(self, peer: int, msg: dict, fd: int | None) -> None:
        """A socket handed over by front `peer`: served here from now on."""
        taken = False
        if fd is not None:
            try:
                sock = socket.socket(fileno=fd)
            except OSError as e:
                log.info("connection from worker %d not adopted: %s", peer, e)
                os.close(fd)
            else:
                try:
                    taken = self.adopt(sock, msg)
                except Exception:       # a bug of ours: the client reconnects
                    log.exception("adopting a connection from worker %d failed", peer)
                if not taken:
                    sock.close()
                else:
                    self.moved_in += 1
        else:
            log.warning("mesh: a connection from worker %d came without its socket", peer)
        self.router.reply(peer, {"op": "adopted", "id": msg.get("id")})
