"""The controller RPC (ARCHITECTURE §1): the controller API that workers call, defined
once as `ControllerAPI`, served in the controller process by `ControllerService` and
called in a worker by `ControllerClient` (its `broker.controller`), over the worker's
channel to the controller (mpbroker/ipc.py).

The RPC methods are the coroutine methods of `ControllerAPI`: the client's stubs and
the server's method table are both derived from it (`RPC_METHODS`), so a method is
added in one place. `metadata()` and `broker_config()` are answered in the worker from
the copies the controller pushes.

Messages (pickled dicts):

    worker -> controller  {"id", "method", "args"}     a call; "id": None for a one-way
                                                      notice (no reply)
    controller -> worker  {"op": "reply", "id", "ok"|"error"}
                          {"op": "md", "md"}           new cluster metadata, to every worker
                          {"op": "cfg", "cfg"}         new broker config, to every worker
                          {"op": "placement", "table"} / {"op": "ask", "rid", "what"}
                                                      (mpbroker/controller/placement.py)

A change is pushed before the reply to the request that made it, on the same ordered
channel, so the requesting worker holds the new metadata when its call returns (as an
in-process controller's direct `apply_metadata` call guarantees). "hello" (broker id,
metadata, config) and the placement messages ("placement", "placement_applied",
"worker_reply") are the protocol's own, not controller API methods.

Exceptions cross by pickle; one that does not survive it becomes `ControllerCallError`
(a MetadataError: code and message kept) or RuntimeError.

This module imports nothing of workers/ or the controllers: the worker's process main
(workers/main.py) and the controller's (mpbroker/controller_main.py) both use it.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import pickle
import socket
import time
from typing import Any, Callable, Protocol

from mpbroker.ipc import Channel, encode
from mpbroker.metadata.model import MetadataError

log = logging.getLogger("mpbroker.controller_rpc")

CALL_TIMEOUT_S = 30.0       # a blocking call of a worker that is booting (no loop yet)


class ControllerAPI(Protocol):
    """The controller as a worker's handlers see it (`broker.controller`): the
    EmbeddedController, or the ZooKeeper controller, in process or behind the RPC."""

    def metadata(self): ...

    def broker_config(self): ...

    async def create_topics(self, specs, validate_only, timeout_ms, quota=None): ...

    async def delete_topics(self, targets, timeout_ms, quota=None): ...

    async def create_partitions(self, specs, validate_only, timeout_ms, quota=None): ...

    async def alter_configs(self, resources, incremental, validate_only): ...

    async def allocate_producer_id(self) -> int: ...

    async def ensure_internal_topic(self, name) -> None: ...

    async def alter_partition(self, topic, partition, leader_id, leader_epoch,
                              partition_epoch, new_isr): ...

    async def elect_leaders(self, election_type, partitions): ...

    async def controlled_shutdown(self, broker_id, broker_epoch=-1): ...

    async def alter_partition_reassignments(self, moves): ...

    async def list_partition_reassignments(self, partitions): ...

    async def controller_request(self, api_key, version, body): ...

    async def log_dir_failed(self, partitions) -> None: ...

    # ---- SCRAM users (issue 17): mpbroker/metadata/scram_users.py has the formats
    async def describe_user_scram_credentials(self, users): ...

    async def alter_user_scram_credentials(self, deletions, upsertions): ...
    # ---- end SCRAM users

    # --- ACLs (issue #17): [AclBinding] / [AclFilter] -> per-item results
    # (mpbroker/controller/acl_ops.py)
    async def create_acls(self, bindings): ...

    async def delete_acls(self, filters): ...

    # client quotas (issue #17): [(pairs, ops)] -> [(pairs, error code, message)]
    async def alter_client_quotas(self, entries, validate_only): ...


RPC_METHODS = frozenset(name for name, fn in vars(ControllerAPI).items()
                        if inspect.iscoroutinefunction(fn))


class ControllerCallError(Exception):
    """A MetadataError raised in the controller process (code and message kept)."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)
        self.code, self.message = code, message


def exception_for_wire(e: BaseException) -> BaseException:
    """`e` if it survives pickle, else a ControllerCallError or RuntimeError saying it."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        if isinstance(e, MetadataError):
            return ControllerCallError(e.code, e.message)
        return RuntimeError(f"{type(e).__name__}: {e}")


# ============================================================================ server
class ControllerService:
    """Serves the controller RPC to the workers and pushes metadata and config to them.

    It stands in the controller's `workers` list: the controller's commit calls
    `apply_metadata`, which pushes to every worker."""

    def __init__(self, controller, loop: asyncio.AbstractEventLoop):
        self.ctl = controller
        self.loop = loop
        self.methods: dict[str, Callable] = {name: getattr(controller, name)
                                             for name in RPC_METHODS}
        self.links: dict[int, Channel] = {}
        self.placement = None      # mpbroker.controller.placement.PlacementManager
        self._pushed_cfg = controller.broker_config()
        controller.workers = [self]

    def add_worker(self, worker_id: int, sock: socket.socket) -> None:
        old = self.links.pop(worker_id, None)
        if old is not None:
            old.close()

        def closed(link):
            if self.links.get(worker_id) is link:
                self.links.pop(worker_id)
                if self.placement is not None:
                    self.placement.worker_lost(worker_id)
        link = Channel(sock, lambda m: self.on_request(link, m), closed)
        self.links[worker_id] = link
        link.attach(self.loop)

    def apply_metadata(self, md) -> None:
        self.broadcast({"op": "md", "md": md})

    def broadcast(self, msg) -> None:
        """`msg` to every worker (pickled once)."""
        frame = encode(msg)
        for link in list(self.links.values()):
            self._send(link, frame)

    @staticmethod
    def _send(link: Channel, frame) -> None:
        if not link.closed:
            try:
                link.send_frame(frame)
            except ConnectionError:
                pass        # it closed: `closed` above forgets the worker

    def push_config_if_changed(self) -> None:
        cfg = self.ctl.broker_config()
        if cfg is not self._pushed_cfg:
            self._pushed_cfg = cfg
            self.broadcast({"op": "cfg", "cfg": cfg})

    def reload(self, cfg) -> None:
        """SIGHUP: the static layer of the controller's config changes (dynamic keys only)."""
        self.ctl.reload(cfg)
        self.push_config_if_changed()

    def on_request(self, link: Channel, msg: dict) -> None:
        rid, method = msg.get("id"), msg.get("method")
        if method == "hello":
            self._reply(link, rid, ok=(self.ctl.broker_id, self.ctl.metadata(),
                                       self.ctl.broker_config()))
            return
        if method in ("placement", "placement_applied", "worker_reply"):
            wid = next((w for w, l in self.links.items() if l is link), None)
            try:
                result = (self.placement.on_worker_message(wid, method, msg.get("args", ()))
                          if self.placement is not None else None)
            except Exception as e:      # never out of the channel's read callback
                log.warning("controller: %s from worker %s failed", method, wid, exc_info=e)
                if rid is not None:
                    self._reply(link, rid, error=exception_for_wire(e))
                return
            if rid is not None:
                self._reply(link, rid, ok=result)
            return
        fn = self.methods.get(method)
        if fn is None:
            self._reply(link, rid, error=RuntimeError(f"unknown controller method {method!r}"))
            return
        self.loop.create_task(self._call(link, rid, method, fn, msg.get("args", ())))

    async def _call(self, link: Channel, rid, method: str, fn: Callable, args) -> None:
        try:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
        except Exception as e:
            # one line here; the worker answers the API's error code for it
            # (workers/handler_errors.py) and logs the request at INFO only
            log.warning("controller call %s failed: %s: %s", method, type(e).__name__, e,
                        exc_info=None if isinstance(e, OSError) or hasattr(e, "code") else e)
            self.push_config_if_changed()
            self._reply(link, rid, error=exception_for_wire(e))
            return
        self.push_config_if_changed()
        self._reply(link, rid, ok=result)

    def _reply(self, link: Channel, rid, **kw) -> None:
        self._send(link, encode({"op": "reply", "id": rid, **kw}))


# ============================================================================ client
def _rpc_stub(name: str):
    """The client method `name`: its ControllerAPI signature, the call sent over the channel."""
    signature = inspect.signature(getattr(ControllerAPI, name))

    async def stub(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return await self.call(name, bound.args[1:])
    stub.__name__ = stub.__qualname__ = name
    stub.__signature__ = signature
    return stub


class ControllerClient:
    """The worker's `broker.controller`: ControllerAPI over the channel. `metadata()` and
    `broker_config()` answer from the copies the controller pushes; the coroutine methods
    (one stub per RPC_METHODS name, added below the class) are RPCs.

    Pushes reach the attached workers (`attach_worker`: `apply_metadata`,
    `apply_placement`); the controller's questions ("ask": placement show and balance,
    its /metrics) are answered by `on_ask(what)`."""

    def __init__(self, sock: socket.socket, on_ask: Callable[[str], Any] | None = None):
        self.link = Channel(sock, self._on_message, self._on_close, name="controller channel")
        self.on_ask = on_ask
        self.broker_id: int | None = None
        self.md = None
        self.cfg = None
        self.placement = None      # the newest placement table pushed
        self.workers: list = []
        self._next_id = 0
        self._futures: dict[int, asyncio.Future] = {}
        self._sync: dict[int, tuple] = {}

    # ----------------------------------------------------------------- plumbing
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.link.attach(loop)

    def attach_worker(self, worker) -> None:
        self.workers.append(worker)

    def hello(self, timeout: float = CALL_TIMEOUT_S) -> None:
        self.broker_id, self.md, self.cfg = self.call_sync("hello", (), timeout)

    def _on_message(self, msg: dict) -> None:
        op = msg["op"]
        if op == "md":
            if self.md is None or msg["md"].epoch > self.md.epoch:
                self.md = msg["md"]
            for w in self.workers:
                w.apply_metadata(msg["md"])
        elif op == "cfg":
            self.cfg = msg["cfg"]
        elif op == "placement":
            table = msg["table"]
            if self.placement is None or table.revision > self.placement.revision:
                self.placement = table
            for w in self.workers:
                w.apply_placement(table)
        elif op == "ask":
            result = self.on_ask(msg.get("what")) if self.on_ask is not None else None
            self.notify("worker_reply", (msg["rid"], result))
        elif op == "reply":
            rid = msg["id"]
            fut = self._futures.pop(rid, None)
            if fut is None:
                self._sync[rid] = (msg.get("ok"), msg.get("error"))
            elif not fut.done():
                if "error" in msg:
                    err = msg["error"]
                    try:    # the controller logged it (workers/handler_errors.py)
                        err.mpbroker_logged_elsewhere = True
                    except AttributeError:
                        pass
                    fut.set_exception(err)
                else:
                    fut.set_result(msg.get("ok"))

    def _on_close(self, link: Channel) -> None:
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(ConnectionError("lost the controller"))
        self._futures.clear()
        log.error("lost the channel to the controller")

    def _request(self, method: str, args) -> int:
        self._next_id += 1
        self.link.send({"id": self._next_id, "method": method, "args": tuple(args)})
        return self._next_id

    def notify(self, method: str, args) -> None:
        """A one-way message to the controller (no reply)."""
        if not self.link.closed:
            self.link.send({"id": None, "method": method, "args": tuple(args)})

    def call_sync(self, method: str, args, timeout: float = CALL_TIMEOUT_S):
        """A call that blocks until its reply (a worker that is booting: no loop yet)."""
        rid = self._request(method, args)
        self._sync[rid] = None
        deadline = time.monotonic() + timeout
        self.link.flush(timeout)
        while self._sync.get(rid) is None:
            if self.link.closed:
                self._sync.pop(rid, None)
                raise ConnectionError("lost the controller")
            left = deadline - time.monotonic()
            if left <= 0:
                self._sync.pop(rid, None)
                raise TimeoutError(f"controller call {method} timed out")
            self.link.poll(left)
        ok, error = self._sync.pop(rid)
        if error is not None:
            raise error
        return ok

    async def call(self, method: str, args):
        fut = asyncio.get_running_loop().create_future()
        rid = self._request(method, args)
        self._futures[rid] = fut
        return await fut

    # ----------------------------------------------------------------- the controller API
    def metadata(self):
        return self.md

    def broker_config(self):
        return self.cfg


for _name in RPC_METHODS:
    setattr(ControllerClient, _name, _rpc_stub(_name))
del _name
