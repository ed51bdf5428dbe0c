"""One end of a worker <-> worker channel of the mesh (ARCHITECTURE §2, cross-process
transport): the supervisor makes one AF_UNIX socket pair per pair of workers before it
forks them (and a new one to each live worker when one respawns, mpbroker/supervisor.py);
the router (workers/router.py) sends forwarded requests and their answers over them.

The framing is the process tree's one (mpbroker/ipc.py): a pickled meta and raw buffers
(forwarded Produce record batches) that are never pickled nor copied in user space. A
mesh channel batches its writes (the frames of one loop iteration leave in one
`sendmsg`: one syscall and one wake-up of the peer), asks for large socket buffers (the
data path's bulk), and its `on_close` gets the channel, which carries the peer's worker
id as `worker` (set by the router). It takes file descriptors: a client connection
handed to another worker (workers/handoff.py) travels as one.
"""
from __future__ import annotations

import socket
from typing import Any, Callable

from mpbroker.ipc import Channel

SOCK_BUF = 4 << 20


class PeerLink(Channel):
    """A mesh channel end (see the module docstring)."""

    def __init__(self, sock: socket.socket, on_message: Callable[[Any], None],
                 on_close: Callable[["PeerLink"], None] | None = None):
        super().__init__(sock, on_message, on_close, sock_buf=SOCK_BUF, name="mesh", batch=True,
                         pass_fds=True)
