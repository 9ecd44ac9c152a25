"""What the modules that act on the running stack may use of it: ``RunningStack``.

The supervisor's ``Stack`` (server/stack/supervisor.py) hands itself down to the watch
loop (``watch_loop``), the rolling restart (``roller``) and the models started on demand
(``model_tiers``, ``on_demand``).  They cannot import it (the supervisor imports them), so
the part of it they use is named here, with its types, as a protocol the Stack satisfies
structurally: mypy checks it where the supervisor passes itself, and
tests/unit/test_running_stack.py checks that the Stack has every member and that those modules
use no other.  A new use is a new member here first.

This module sits below all four (it imports none of them), so they import it at run time
and the import graph shows the dependency.  ``Holds`` lives here for the same reason: the
watch loop, the restart and the on-demand models all take processes through it.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Callable, Optional, Protocol, runtime_checkable

from server.settings import Settings
from server.stack.app_tier import AppTier
from server.stack.engine_args import EngineCommand
from server.stack.engine_tier import EngineTier
from server.stack.processes import ManagedProcess
from server.stack.restart_control import Progress
from server.stack.rolling import Step
from server.stack.topology import Topology

# One `ernie-chat restart` checked and queued for roller.serve: the new settings, the steps,
# each engine copy's new command, where its progress goes, and its run folder.
Restart = tuple[Settings, list[Step], list[EngineCommand], Progress, Path]


class Holds:
    """The processes taken from the watch loop: stopped on purpose, or being restarted by it.

    The lock makes "held or alive?" one step, for the loop and for whoever takes one: the
    loop takes ``lock`` itself to look at a child and claim a dead one in that step."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: set[str] = set()

    def hold(self, name: str, proc: ManagedProcess) -> bool:
        """Take a running process from the watch loop; False if it is down or held already."""
        with self.lock:
            if name in self.held or not proc.alive():
                return False
            self.held.add(name)
            return True

    def release(self, name: str) -> None:
        with self.lock:
            self.held.discard(name)

    def park(self, name: str) -> None:
        """Hold a process that does not run yet (a model started on demand)."""
        with self.lock:
            self.held.add(name)


@runtime_checkable
class RunningStack(Protocol):
    """The supervisor's Stack as the watch loop, the restart and the on-demand models see it."""

    settings: Settings  # replaced by a rolling restart once every process runs the new ones
    root: Path
    out: Callable[[str], None]
    topology: Optional[Topology]  # planned before anything starts
    tiers: list[EngineTier]  # one per model of ERNIE_MODELS, else ERNIE_MODEL's alone
    engines: Optional[EngineTier]  # ERNIE_MODEL's, or the first model's
    apps: Optional[AppTier]
    balancer: Optional[ManagedProcess]  # HAProxy, when a tier has several processes
    holds: Holds
    restart_asked: threading.Event  # set by SIGHUP; the watch loop begins the restart
    rolling_now: threading.Event  # a restart runs
    rolling: Optional[threading.Thread]  # roller.serve's, once the first restart comes
    restarts: queue.Queue[Restart]

    @property
    def stats_socket(self) -> Path:
        """HAProxy's admin socket, through which a restart drains a process."""
        ...

    def restart_balancer(self) -> None:
        """Start HAProxy again and wait until it listens."""
        ...
