"""Keeping the stack up once it runs: restart whichever child dies or hangs.

Every half second the loop looks at each child of `up` (the engine copies, HAProxy, the
app workers).  A dead one is restarted after a capped exponential backoff (1, 2, 4 ...
30 s); a hung engine (no ``/health`` answer for a while) is killed first.  The loop gives
up, with the doctor's diagnosis, when an engine copy cannot recover or a child fails
ERNIE_MAX_RESTARTS times in a row; one that stayed up two minutes starts counting again.

Others stop processes on purpose: a rolling restart (server/stack/roller.py, begun from the
loop when SIGHUP came) and the models started on demand (server/stack/on_demand.py).  They
first take the process (``Holds.hold``, server/stack/running.py), so the loop leaves it
alone and takes its stop for no crash.

``stack`` below is server.stack.supervisor's Stack, seen as the ``RunningStack`` of
server/stack/running.py (the supervisor imports this module).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from server.stack import roller
from server.stack.engine_tier import EngineProcess, EngineTier, StartupFailed
from server.stack.processes import ManagedProcess
from server.stack.running import RunningStack

BACKOFF_CAP_S = 30.0
# A process that stayed up this long is healthy again: its restart count resets.
STABLE_AFTER_S = 120.0


def backoff_delay(attempt: int, base_s: float = 1.0, cap_s: float = BACKOFF_CAP_S) -> float:
    """1, 2, 4, 8 ... seconds, never more than ``cap_s``."""
    return min(cap_s, base_s * 2 ** max(0, attempt - 1))


@dataclass
class Child:
    """A process the watch loop keeps up: how to start it again, and what its death means."""

    name: str
    proc: ManagedProcess
    restart: Callable[[], None]
    engine: Optional[EngineProcess] = None  # engine copies get the doctor's diagnosis
    tier: Optional[EngineTier] = None
    failures: int = 0


def children(stack: RunningStack) -> list[Child]:
    found = []
    for tier in stack.tiers:
        found += [Child(e.label, e.proc, lambda e=e, tier=tier: tier.restart(e), e, tier)
                  for e in tier.engines]
    if stack.balancer:
        found.append(Child("balancer", stack.balancer, stack.restart_balancer))
    if stack.apps:
        found += [Child(w.label, w.proc, lambda w=w: stack.apps.start(w)) for w in stack.apps.workers]
    return found


def keep_up(stack: RunningStack) -> str:
    """Restart whichever process dies or hangs; return why, once one cannot be kept up."""
    holds, watched = stack.holds, children(stack)
    while True:
        if stack.restart_asked.is_set():
            stack.restart_asked.clear()
            roller.begin(stack)
        for child in watched:
            with holds.lock:
                if child.name in holds.held:
                    continue
                if child.engine is not None and child.engine.hung():
                    stack.out(f"[{child.name}] /health has not answered for a while: the engine "
                              "is hung; killing it")
                    child.proc.kill()
                if child.proc.alive():
                    if time.monotonic() - child.proc.started_at > STABLE_AFTER_S:
                        child.failures = 0
                    continue
                holds.held.add(child.name)
            try:
                final = handle_death(stack, child)
            finally:
                holds.release(child.name)
            if final:
                return final
        time.sleep(0.5)


def handle_death(stack: RunningStack, child: Child) -> Optional[str]:
    out = stack.out
    child.failures += 1
    out(f"[{child.name}] exited with code {child.proc.returncode}")
    if child.tier is not None:  # first: the chat tells its users from this file
        child.tier.state("restarting")
    child.proc.stop(grace_s=5)  # its children (vLLM's engine core) may still run
    if child.tier is not None:
        out(child.tier.explain_failure(child.engine, "The engine stopped."))
        final = child.tier.unrecoverable(child.engine)
        if final:
            child.tier.state("failed", reason=final)
            return final
    limit = stack.settings.max_restarts  # read now: a rolling restart may have changed it
    if child.failures > limit:
        return (f"The {child.name} failed {child.failures} times in a row; giving "
                f"up (ERNIE_MAX_RESTARTS={limit}).")
    delay = backoff_delay(child.failures)
    out(f"[{child.name}] restarting in {delay:.0f} s (attempt {child.failures} of {limit})")
    time.sleep(delay)
    try:
        child.restart()
    except StartupFailed as exc:
        out(str(exc))
    return None
