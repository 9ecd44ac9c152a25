"""How tune starts the engine of one point: ``start_vllm``, the one function to swap.

It starts vLLM with exactly the command ``up`` uses (engine_args.engine_command) in its
own process group, logs to the point's log, waits until it answers /health and
/v1/models, hands it over as a :class:`RunningEngine`, and stops the whole group on the
way out, whatever happens: Ctrl-C, SIGTERM, a failed start, the time limits.  A stack
that starts engines its own way (several copies behind a balancer) plugs in through
``Sweep.start_engine`` with the same signature (:data:`StartEngine`).
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Optional

from server.paths import ROOT
from server.progress import StatusLine
from server.settings import Settings
from server.stack import doctor
from server.stack.engine_args import engine_command
from server.stack.processes import ManagedProcess
from server.stack.readiness import probe_engine, wait_until
from server.stack.vllm_log import START_MARKER, read_tail


@dataclass
class RunningEngine:
    """An engine serving one point, as its starter hands it over."""

    url: str
    api_key: Optional[str]
    served: dict            # vLLM's /v1/models entry: id, max_model_len
    log: Path               # where its start-up is logged
    pid: Optional[int]
    startup_s: float
    alive: Callable[[], bool]


class PointFailed(Exception):
    """The engine of a point did not start or serve; ``reason`` says why."""

    def __init__(self, reason: str, pid: Optional[int] = None, timed_out: bool = False):
        super().__init__(reason)
        self.reason, self.pid, self.timed_out = reason, pid, timed_out


@dataclass(frozen=True)
class PointStart:
    """What a starter needs to start the engine of one point."""

    settings: Settings      # the point's: its overrides, a free port, --engine-args
    model: str
    device: str
    python: Path
    log: Path               # where the engine's output goes
    label: str              # for the status line
    timeout_s: float        # until it must answer


# A point's engine, from start to stop: a context manager that hands over the engine
# once it answers and stops it (and everything it started) on exit.
StartEngine = Callable[[PointStart], ContextManager[RunningEngine]]


@contextlib.contextmanager
def signals_ignored():
    """A second Ctrl-C must not interrupt the stop that frees the memory."""
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def failure_reason(log: Path) -> str:
    lines = read_tail(log)
    findings = doctor.diagnose(lines, since_last_start=True)
    if findings:
        return f"{findings[0].title}: {findings[0].detail}"
    return " / ".join(l.strip()[-160:] for l in doctor.last_error_lines(lines, 2)) or "no output"


@contextlib.contextmanager
def start_vllm(start: PointStart) -> Iterator[RunningEngine]:
    """One vLLM for a point, as `up` starts it, until it answers /health and /v1/models."""
    settings, log = start.settings, start.log
    command = engine_command(settings, start.model, start.device, start.python)
    engine = ManagedProcess("engine", command.argv, log, env=command.env, cwd=ROOT, marker=START_MARKER)
    status = StatusLine(start.label)
    url = settings.engine_base_url
    try:
        engine.start()
        entry = wait_until(lambda: probe_engine(url, settings.api_key_value), lambda: not engine.alive(),
                           start.timeout_s, status, lambda: f"starting vLLM, log {log.name}")
        if not entry:
            reason = (failure_reason(log) if not engine.alive() else
                      "not ready within the time limit (--point-timeout-s/--total-timeout-s)")
            status.done(reason)
            raise PointFailed(reason, engine.pid, timed_out=engine.alive())
        status.done(f"vLLM ready in {status.elapsed:.0f} s")
        yield RunningEngine(url, settings.api_key_value, entry, log, engine.pid, status.elapsed, engine.alive)
    finally:
        with signals_ignored():
            engine.stop()
