"""Read the figures vLLM reports about its KV cache out of its log.

vLLM prints them in two formats (docs/notes.md): one line in 0.33 and the CPU build
(``GPU KV cache size: N tokens, Maximum concurrency for M tokens per request:
Cx``), two lines in 0.20.  Both are parsed; ``CPU`` replaces ``GPU`` on CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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
