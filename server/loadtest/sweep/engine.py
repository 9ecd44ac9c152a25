"""How tune starts the engine of one point: ``start_vllm``, the one function to swap.

It starts vLLM exactly as ``up`` does (engine_tier.copy_process: the same command and,
on a CPU, the same lower priority) in its own process group, logs to the point's log,
waits until it answers /health and /v1/models, hands it over as a :class:`RunningEngine`,
and stops the whole group on the way out, whatever happens: Ctrl-C, SIGTERM, a failed
start, the time limits.  The settings that start more processes (API servers, engine
copies per GPU) are laid out by the stack's own topology, so a point with two copies runs
them behind HAProxy as `up` does.  Another starter plugs in through ``Sweep.start_engine``
with the same signature (:data:`StartEngine`).
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Optional

from server.paths import ROOT
from server.progress import StatusLine
from server.settings import Settings
from server.stack import doctor
from server.stack.balancer import managed_haproxy, max_connections, open_files_limit
from server.stack.engine_args import engine_command
from server.stack.engine_tier import copy_process, pooled_settings, starts_together
from server.stack.processes import ManagedProcess, free_port, port_free
from server.stack.readiness import probe_engine, wait_until
from server.stack.topology import Topology, balancer_config, plan_topology
from server.stack.vllm_log import read_tail, starting_status


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


def copies_of(start: PointStart) -> tuple[Topology, list[ManagedProcess], bool]:
    """The point's engine copies and API servers exactly as `up` lays them out (topology),
    each copy run as `up` runs it (the first logs to the point's log), and whether they start
    together (their KV pools in bytes, as EngineTier.together)."""
    topology = plan_topology(start.settings, start.device, os.cpu_count() or 1, free_port)
    settings = pooled_settings(start.settings, len(topology.copies), start.model, start.device)
    return topology, [copy_process(engine_command(settings, start.model, start.device, start.python, copy),
                                   start.device, copy, start.log, ROOT) for copy in topology.copies], \
        starts_together(settings, start.device)


@contextlib.contextmanager
def start_vllm(start: PointStart) -> Iterator[RunningEngine]:
    """The point's vLLM, as `up` starts it (its copies together, or one after another where
    their KV pools could not be planned; then HAProxy in front of them), until each answers
    /health and /v1/models."""
    settings, log = start.settings, start.log
    topology, engines, together = copies_of(start)
    haproxy: Optional[ManagedProcess] = None
    status = StatusLine(start.label)
    key = settings.api_key_value
    try:
        for engine in engines if together else ():
            engine.start()
        for copy, engine in zip(topology.copies, engines):
            url = f"http://{copy.host}:{copy.port}"
            if not together:
                engine.start()
            name = f"copy {copy.index + 1}/{len(engines)}: " if len(engines) > 1 else ""
            entry = wait_until(lambda: probe_engine(url, key), lambda: not engine.alive(),
                               start.timeout_s - status.elapsed, status,
                               lambda: f"{name}{starting_status(engine.log_path)}")
            if not entry:
                reason = (failure_reason(engine.log_path) if not engine.alive() else
                          "not ready within the time limit (--point-timeout-s/--total-timeout-s)")
                status.done(reason)
                raise PointFailed(reason, engine.pid, timed_out=engine.alive())
        if topology.balanced_engine:
            haproxy = start_balancer(topology, settings, log)
        status.done(f"vLLM ready in {status.elapsed:.0f} s")
        yield RunningEngine(settings.engine_base_url, key, entry, log, engines[0].pid,
                            status.elapsed, lambda: all(e.alive() for e in engines))
    finally:
        with signals_ignored():
            for proc in ([haproxy] if haproxy else []) + engines:
                proc.stop()


def start_balancer(topology: Topology, settings: Settings, log: Path) -> ManagedProcess:
    """HAProxy in front of the copies, where the point's engine URL points."""
    config = balancer_config(topology, settings, max_connections(open_files_limit()))
    haproxy = managed_haproxy(config, log.with_name(f"{log.stem}-haproxy.cfg"),
                              log.with_name(f"{log.stem}-haproxy.log"), ROOT, settings.api_key_value)
    haproxy.start()
    if not wait_until(lambda: not port_free(topology.engine_host, topology.engine_port),
                      lambda: not haproxy.alive(), 10, StatusLine("balancer"), lambda: "starting HAProxy"):
        haproxy.stop()
        raise PointFailed(f"HAProxy did not start; see {haproxy.log_path}", haproxy.pid)
    return haproxy
