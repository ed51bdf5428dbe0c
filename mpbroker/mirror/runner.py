"""An `mpbroker mirror` process: its flows, its signals, systemd, its --workers children.

* `run_workers(cfg, ...)` (the process, --workers 1): one `FlowTask` thread per enabled
  flow (filtered by --clusters), READY=1 to systemd once they are built, a progress
  line per topic every --progress-interval seconds (in `FlowTask`). SIGTERM or SIGINT:
  STOPPING=1, every flow drains (delivers what it read, commits) and leaves its group,
  exit 0. A flow whose thread dies takes the process down with exit 1 (systemd's
  Restart=on-failure brings it back; the group has moved its partitions meanwhile).
* `run_parent(argv, n)` (--workers N > 1): N child processes, each the command above
  with `--worker-index i`, each a member of the flows' groups, so the source cluster's
  group protocol spreads the partitions over the N x processes. The parent only
  supervises: READY=1 once started, SIGTERM forwarded to every child, a child that
  exits unexpectedly restarted after a backoff (exit 2, a bad config, stops all).
* `--metrics-listener http://HOST:PORT`: Prometheus metrics (`metrics.py`), worker i of
  --workers N on PORT + i.

Only worker 0 of a process (or the process itself) emits checkpoints and heartbeats.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional, Tuple

from mpbroker.mirror.config import MirrorConfig
from mpbroker.mirror.metrics import serve as serve_metrics
from mpbroker.mirror.task import FlowTask
from mpbroker.sdnotify import ENV_SOCKET, Notifier

log = logging.getLogger("mpbroker.mirror")
STOP_TIMEOUT_S = 60.0


def _on_signals(handler) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def run_workers(cfg: MirrorConfig, *, member: str, checkpoints: bool,
                progress_interval_s: float, metrics: Optional[Tuple[str, int]] = None) -> int:
    stop = threading.Event()
    notifier = Notifier.from_env()
    tasks = [FlowTask(f, stop, member=member, checkpoints=checkpoints,
                      progress_interval_s=progress_interval_s) for f in cfg.flows]
    httpd = None
    if metrics is not None:
        try:
            httpd = serve_metrics(tasks, *metrics)
        except OSError as e:
            print(f"mpbroker mirror: cannot serve metrics on {metrics[0]}:{metrics[1]}: {e}",
                  file=sys.stderr)
            return 2
    _on_signals(lambda *_: stop.set())
    failed: List[str] = []

    def body(task: FlowTask) -> None:
        try:
            task.run()
        except Exception:                               # noqa: BLE001 - reported, then exit 1
            log.exception("flow %s failed", task.flow.name)
            failed.append(task.flow.name)
            stop.set()

    threads = [threading.Thread(target=body, args=(t,), name=f"mirror-{t.flow.name}", daemon=True)
               for t in tasks]
    for t in threads:
        t.start()
    names = ", ".join(f.name for f in cfg.flows)
    notifier.ready(f"mirroring {names}")
    log.info("mirror %s running flows %s", member, names)
    while not stop.wait(0.5):
        pass
    if not failed:
        notifier.stopping("draining")
        log.info("stopping: draining and committing")
    for t in threads:
        t.join(STOP_TIMEOUT_S)
    if httpd is not None:
        httpd.shutdown()
    log.info("stopped")
    return 1 if failed else 0


def run_parent(child_argv: List[str], workers: int,
               metrics: Optional[Tuple[str, int]] = None) -> int:
    """Supervise `workers` children `child_argv + ["--worker-index", i]` (and, with
    `metrics`, `--metrics-listener http://HOST:PORT+i`)."""
    notifier = Notifier.from_env()
    env = {k: v for k, v in os.environ.items() if k != ENV_SOCKET}
    stopping = threading.Event()
    _on_signals(lambda *_: stopping.set())
    children: List[Optional[subprocess.Popen]] = [None] * workers
    restart_at = [0.0] * workers
    backoff = [1.0] * workers

    def start(i: int) -> None:
        extra = [] if metrics is None else \
            ["--metrics-listener", f"http://{metrics[0]}:{metrics[1] + i if metrics[1] else 0}"]
        children[i] = subprocess.Popen(child_argv + ["--worker-index", str(i)] + extra, env=env)

    for i in range(workers):
        start(i)
    notifier.ready(f"{workers} mirror workers")
    rc = 0
    while not stopping.wait(0.5):
        now = time.monotonic()
        for i, c in enumerate(children):
            if c is None:
                if now >= restart_at[i]:
                    start(i)
                continue
            code = c.poll()
            if code is None:
                continue
            if code == 2:
                log.error("worker %d: bad configuration (exit 2); stopping", i)
                rc = 2
                stopping.set()
                break
            log.warning("worker %d exited with %s; restarting in %.0f s", i, code, backoff[i])
            children[i] = None
            restart_at[i] = now + backoff[i]
            backoff[i] = min(30.0, backoff[i] * 2)
    notifier.stopping("stopping workers")
    for c in children:
        if c is not None and c.poll() is None:
            c.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for c in children:
        if c is None:
            continue
        try:
            c.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()
    return rc


def child_command(args_argv: List[str]) -> List[str]:
    return [sys.executable, "-m", "mpbroker.cli.main", "mirror", *args_argv]
