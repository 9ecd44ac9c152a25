"""The engine tier: one or more copies of vLLM's ``serve``, each a child of the supervisor.

Everything the stack does to an engine happens here: build its environment and
the model, refuse settings that cannot work (pre-flight), start each copy and
wait until it really serves, check in its log that what was asked for took
effect (the KV pool, the number of API servers), notice a hung copy, and explain
a failure from the log.

Copies share one GPU by memory share, and vLLM's memory profiling counts what
another process allocates meanwhile as its own (vllm-project/vllm#9198).  So each
copy's KV pool is given in bytes (on a CPU always; on a GPU from the plan for its
share, ``preflight.pooled_copies``), and the copies start together.  Only when the
plan cannot be made (no model config yet, no NVML) do GPU copies start one after
another, sizing their pools themselves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from server.engine_state import write_state
from server.errors import ErnieChatError
from server.plan import kv_planner as kp
from server.plan import preflight, stream_interval
from server.plan.device import read_memory
from server.plan.model_config import load_shape
from server.progress import StatusLine
from server.settings import Settings
from server.stack import doctor, engine_env, provision
from server.stack.engine_args import EngineCommand, EngineCopy, engine_command
from server.stack.model_source import choose_model
from server.stack.processes import ManagedProcess
from server.stack.readiness import http_ok, probe_engine, wait_until
from server.stack.vllm_log import (api_server_count, engines_ready, parse_kv_report, read_tail,
                                   render_phases, starting_status, startup_phases)

# A live engine that fails every /health probe this long is hung (e.g. SIGSTOP, a
# deadlocked GPU): probing every 5 s with a 3 s timeout.
HEALTH_EVERY_S, HEALTH_TIMEOUT_S, HUNG_AFTER_S = 5.0, 3.0, 15.0
# On CPU, vLLM's engine pins a core and its API server streams on the other: a
# lower priority keeps the chat and the browser responsive on a small machine.
CPU_ENGINE_NICE = 10


class StartupFailed(ErnieChatError, RuntimeError):
    """The stack could not start; the message carries the diagnosis, ``reason`` its gist."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


@dataclass
class EngineInfo:
    model: str
    is_demo: bool
    max_model_len: int


class EngineProcess:
    """One copy: its process, its log, its URL, and whether it answers /health."""

    def __init__(self, copy: EngineCopy, proc: ManagedProcess, api_key: Optional[str],
                 tier: str = "engine"):
        self.copy, self.proc, self.api_key, self.tier = copy, proc, api_key, tier
        self._last_probe = 0.0
        self._unhealthy_since: Optional[float] = None
        self.startup_s = 0.0

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.copy.host in ("0.0.0.0", "::", "") else self.copy.host
        return f"http://{host}:{self.copy.port}"

    @property
    def log_path(self) -> Path:
        return self.proc.log_path

    @property
    def label(self) -> str:
        return self.tier if self.copy.copies == 1 else f"{self.tier} {self.copy.index}"

    def hung(self) -> bool:
        """True once a running copy has failed every /health probe for HUNG_AFTER_S."""
        if not self.proc.alive():
            return False
        now = time.monotonic()
        if now - self._last_probe < HEALTH_EVERY_S:
            return False
        self._last_probe = now
        if http_ok(f"{self.url}/health", HEALTH_TIMEOUT_S):
            self._unhealthy_since = None
            return False
        self._unhealthy_since = self._unhealthy_since or now
        return now - self._unhealthy_since >= HUNG_AFTER_S

    def mark_started(self, took_s: float) -> None:
        self._unhealthy_since = None
        self.startup_s = took_s


def copy_log_path(main_log: Path, copy: EngineCopy) -> Path:
    """llm.log for the first copy (what `doctor` reads by default), llm-copy1.log ... after."""
    return main_log if copy.index == 0 else main_log.with_name(
        f"{main_log.stem}-copy{copy.index}{main_log.suffix}")


def copy_process(command: EngineCommand, device: str, copy: EngineCopy, main_log: Path,
                 root: Path) -> ManagedProcess:
    """One engine copy's process as `up` runs it; `tune` measures its points with the same."""
    return ManagedProcess("engine", command.argv, copy_log_path(main_log, copy),
                          env=command.env, cwd=root, marker=doctor.START_MARKER,
                          nice=CPU_ENGINE_NICE if device == "cpu" else 0)


def starts_together(settings: Settings, device: str) -> bool:
    """Copies whose KV pools are given in bytes start at once (the module's docstring)."""
    return device == "cpu" or settings.kv_cache_gib is not None


def copies_line(copies: int, together: bool, kv_cache_gib: Optional[float]) -> str:
    """How `up` says the copies start, and why."""
    if together and kv_cache_gib is not None:
        return (f"[engine] {copies} copies start together, each with a KV pool of {kv_cache_gib:.2f} GiB "
                "given in bytes (--kv-cache-memory-bytes)")
    if together:
        return f"[engine] {copies} copies start together"
    return (f"[engine] {copies} copies start one after another: each sizes its KV pool from the "
            "memory left free (no plan without the model's config or NVML)")


def pooled_settings(settings: Settings, copies: int, model: str, device: str) -> Settings:
    """``preflight.pooled_copies`` where the model's shape and the device can be read, for
    `tune`'s points (``EngineTier.preflight`` does the same for `up`); else the settings."""
    try:
        return preflight.pooled_copies(settings, copies, load_shape(model)[0], read_memory(device))
    except Exception:  # no config yet or no NVML: the copies size their pools themselves
        return settings


class EngineTier:
    """The copies of one ``up``, prepared once, started together where their pools are in
    bytes, and restarted one by one."""

    def __init__(self, settings: Settings, copies: tuple[EngineCopy, ...], device: str,
                 root: Path, log_path: Path, out: Callable[[str], None] = print,
                 label: str = "engine", model: Optional[str] = None):
        """``model``: the served name of a model of ERNIE_MODELS, whose state file it writes."""
        self.settings, self.copies, self.device = settings, copies, device
        self.root, self.log_path, self.out, self.label = root, log_path, out, label
        self.model = model
        self.engines: list[EngineProcess] = []
        self.info: Optional[EngineInfo] = None
        self.plan: Optional[kp.Plan] = None
        self.together = starts_together(settings, device)  # prepare() knows the pools
        self.model_path = ""
        self.python = ""
        self.is_demo = False
        self.interval_choice: Optional[stream_interval.IntervalChoice] = None

    # --- before anything starts -------------------------------------------
    def prepare(self) -> None:
        self.resolve_model()
        self.build_commands()

    def resolve_model(self) -> None:
        """The engine's Python and the model's folder or hub id (the demo model built)."""
        s = self.settings
        python = self.python = engine_env.ensure_engine_env(s.engine_venv, self.device, self.root, s.torch_index_url)
        choice = choose_model(s, root=self.root)
        self.out(f"[model] {choice.reason}" if choice.is_demo else f"[model] serving {choice.reason}")
        provision.ensure_model(choice, python, self.root)
        self.model_path, self.is_demo = choice.path, choice.is_demo

    def build_commands(self) -> None:
        """Each copy's process, once the pre-flight checks pass."""
        s, self.plan = self.preflight()
        s = self.grouped(s)
        self.together = starts_together(s, self.device)
        commands = [engine_command(s, self.model_path, self.device, self.python, copy)
                    for copy in self.copies]
        for copy, command in zip(self.copies, commands):
            proc = copy_process(command, self.device, copy, self.log_path, self.root)
            self.engines.append(EngineProcess(copy, proc, s.api_key_value, self.label))
        # printable(): the one rendering of a command that is safe to log (the key is in env).
        self.out(f"[{self.label}] {self.device}: {commands[0].printable()}")
        if len(self.copies) > 1:
            self.out(copies_line(len(self.copies), self.together, s.kv_cache_gib))
        shares = [command.env.get("VLLM_CPU_OMP_THREADS_BIND") for command in commands]
        if len(shares) > 1 and all(shares):
            self.out(f"[{self.label}] each copy computes on cores of its own: "
                     + "; ".join(f"copy {i} on {share}" for i, share in enumerate(shares)))

    def grouped(self, s: Settings) -> Settings:
        """``s`` with the tokens per streamed event chosen for this vLLM, unless the user chose."""
        if s.stream_interval is not None:
            return s
        if self.interval_choice is None:  # probed and said once; a rolling restart keeps it
            self.interval_choice = stream_interval.choose(self.device, self.python)
            if self.interval_choice.reason:
                self.out(f"[{self.label}] {self.interval_choice.reason}")
        return self.interval_choice.applied(s)

    def preflight(self) -> tuple[Settings, Optional[kp.Plan]]:
        """Refuse settings that cannot work; return the settings the copies' commands are built
        from (each copy's KV pool in bytes where it can be planned) and one copy's KV plan, to
        compare with vLLM's."""
        try:
            shape, _ = load_shape(self.model_path)
            memory = read_memory(self.device)
        except Exception as exc:  # no config yet (first download) or no NVML: vLLM will tell
            self.out(f"[plan] pre-flight checks skipped: {exc}")
            return self.settings, None
        copies = len(self.copies)
        problems = preflight.check(preflight.per_copy_settings(self.settings, copies), shape, memory)
        if problems:
            raise StartupFailed("Pre-flight checks failed:\n" + "\n".join(f"  - {p}" for p in problems))
        pooled = preflight.pooled_copies(self.settings, copies, shape, memory)
        return pooled, preflight.plan_for(preflight.per_copy_settings(pooled, copies), shape, memory)

    # --- starting -----------------------------------------------------------
    def state(self, state: str, **details) -> None:
        """Tell the chat what this tier's engine does (server/engine_state.py)."""
        write_state(self.settings, state, self.model, **details)

    def start_all(self) -> EngineInfo:
        began = time.monotonic()
        self.state("starting")
        if self.together:
            for engine in self.engines:
                engine.proc.start()
        for engine in self.engines:
            self.start_or_stop_all(engine, already_started=self.together)
        self.ready_since(began)
        return self.info

    def ready_since(self, began: float) -> None:
        """Ready, after a start that began at ``began`` (time.monotonic()): the chat's "took N s
        last time" is this start's."""
        self.state("ready", load_s=round(time.monotonic() - began, 1))

    def start_or_stop_all(self, engine: EngineProcess, already_started: bool = False) -> None:
        """``start``, and on failure the whole tier stops and the chat is told it failed."""
        try:
            self.start(engine, already_started)
        except StartupFailed as exc:
            self.state("failed", reason=exc.reason)
            self.stop()
            raise

    def start(self, engine: EngineProcess, already_started: bool = False) -> EngineInfo:
        """Start one copy (unless it was) and wait until it serves; raise with the diagnosis,
        leaving the other copies as they are."""
        s = self.settings
        if not already_started:
            engine.proc.start()
        status = StatusLine(engine.label)
        entry = wait_until(
            lambda: self.ready(engine), lambda: not engine.proc.alive(), s.startup_timeout_s, status,
            lambda: starting_status(engine.log_path),
        )
        if not entry:
            reason = (f"exited with code {engine.proc.returncode}" if not engine.proc.alive()
                      else f"was not ready after {s.startup_timeout_s:.0f} s")
            status.done(f"vLLM {reason}")
            raise StartupFailed(self.explain_failure(engine, f"vLLM {reason}."), reason=reason)
        status.done(f"vLLM ready at {engine.url}")
        engine.mark_started(status.elapsed)
        self.info = EngineInfo(entry.get("id", s.served_model_name), self.is_demo,
                               int(entry.get("max_model_len") or s.max_model_len))
        return self.info

    def ready(self, engine: EngineProcess) -> Optional[dict]:
        """The served model once the copy serves; a headless node (ERNIE_NODE_ROLE=engines)
        has no HTTP API, so its log says when its copies are loaded."""
        s = self.settings
        if s.node_role == "head":
            return probe_engine(engine.url, s.api_key_value)
        local = s.data_parallel_size_local or 1
        if engines_ready(read_tail(engine.log_path)) >= local:
            return {"id": s.served_model_name, "max_model_len": s.max_model_len}
        return None

    def restart(self, engine: EngineProcess) -> None:
        began = time.monotonic()
        self.state("starting")
        self.start_or_stop_all(engine)
        self.ready_since(began)

    def reconfigure(self, settings: Settings) -> list[EngineCommand]:
        """Each copy's command under new settings, checked like a start's (pre-flight); the
        copies take them at their next start (``use``). Raises before anything changed."""
        old, self.settings = self.settings, settings
        try:
            s, self.plan = self.preflight()
        except StartupFailed:
            self.settings = old
            raise
        s = self.grouped(s)
        return [engine_command(s, self.model_path, self.device, self.python, copy) for copy in self.copies]

    @staticmethod
    def use(engine: EngineProcess, command: EngineCommand) -> None:
        engine.proc.argv, engine.proc.env = command.argv, command.env

    # --- what vLLM reports ------------------------------------------------------
    def report(self) -> None:
        """The KV pool and API servers vLLM really made, beside what was asked and predicted."""
        assert self.info is not None
        first = self.engines[0]
        lines = read_tail(first.log_path)
        kv = parse_kv_report(lines)
        phases = startup_phases(lines)
        if phases:
            self.out("\n".join(f"[{self.label}] " + line for line in
                               render_phases(phases, first.startup_s).splitlines()))
        self.out(f"[{self.label}] max-model-len {self.info.max_model_len} tokens")
        if kv.kv_tokens is not None:
            memory = f" in {kv.kv_memory_gib:.2f} GiB" if kv.kv_memory_gib else ""
            each = " per copy" if len(self.engines) > 1 else ""
            self.out(f"[{self.label}] KV cache: {kv.kv_tokens:,} tokens{memory}{each}, "
                     f"{kv.max_concurrency:.1f} concurrent requests of max-model-len "
                     f"(as vLLM reports in {first.log_path.name})")
            if self.plan is not None:
                self.out(f"[plan]   KV tokens {preflight.compare(self.plan.reported_kv_tokens, kv.kv_tokens)}; "
                         f"concurrency predicted {self.plan.max_concurrency:.2f}x / reported "
                         f"{kv.max_concurrency:.2f}x")
        if self.settings.node_role == "engines":
            return  # no API servers here: the head runs them
        for engine in self.engines:
            self.out(api_servers_line(engine.label, engine.copy.api_servers,
                                      api_server_count(read_tail(engine.log_path))))

    def explain_failure(self, engine: EngineProcess, headline: str) -> str:
        lines = read_tail(engine.log_path)
        diagnosis = doctor.explain(lines, since_last_start=True)
        if diagnosis:
            return f"{headline} Diagnosis from {engine.log_path}:\n{diagnosis}"
        tail = "\n".join("    " + line for line in doctor.last_error_lines(lines))
        return f"{headline} No known cause found; last lines of {engine.log_path}:\n{tail}"

    def unrecoverable(self, engine: EngineProcess) -> Optional[str]:
        """A final message when the log shows a failure that a restart cannot fix."""
        findings = doctor.diagnose(read_tail(engine.log_path), since_last_start=True)
        fatal = [f for f in findings if f.key in doctor.NOT_FIXED_BY_RESTART]
        if not fatal:
            return None
        return ("The engine cannot start with these settings, so it is not restarted: "
                + "; ".join(f"{f.title}. Fix: {f.fix}" for f in fatal))

    def stop(self) -> None:
        for engine in self.engines:
            if engine.proc.pid is not None:
                engine.proc.stop()

    def running(self) -> bool:
        return any(engine.proc.alive() for engine in self.engines)


def api_servers_line(label: str, asked: int, seen: Optional[int]) -> str:
    """Whether vLLM runs the API servers asked for, in words (the count comes from its log)."""
    if seen is None:
        return (f"[{label}] {asked} API server(s) asked for; vLLM's log does not say how many "
                "run (an older vLLM?)")
    if seen == asked:
        return f"[{label}] {seen} API server process{'es' if seen > 1 else ''} (as asked, per vLLM's log)"
    return (f"[{label}] WARNING: {asked} API server(s) asked for, but vLLM's log shows {seen}: "
            "the setting did not take effect (ERNIE_API_SERVERS; is --api-server-count also in "
            "ERNIE_EXTRA_ENGINE_ARGS?)")
