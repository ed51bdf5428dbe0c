"""Process titles: `mpbroker: supervisor`, `mpbroker: controller`, `mpbroker: worker 3`,
so that `ps` and `top` tell the processes apart (they are forks of one command line).
Each process sets its own title once, first thing (setproctitle rewrites argv in place)."""
from __future__ import annotations

from setproctitle import setproctitle

PREFIX = "mpbroker: "


def set_title(role: str) -> None:
    setproctitle(PREFIX + role)
