"""vLLM's tokens per streamed event when ERNIE_STREAM_INTERVAL is unset (pure, and one probe).

At vLLM's default interval every token is one SSE event, and each event costs the API server
that sends it and the app worker that reads it. On an H100 with 16 cores, vLLM's API servers
spent 0.17 CPU-seconds per 1,000 tokens at one token per event (2,500 chat users) and
0.060-0.064 at eight (3,000 users; docs/performance.md, "3,000 users on one H100"). Since
vLLM 0.32 the app asks per request, and only in a crowd (``stream_interval``,
app/conversation/token_batcher.py); an older vLLM ignores the field, so there the engine-wide
flag groups every request's tokens instead. The first token still comes alone and at once
(vLLM's output processor), and a chat alone shows a frame every 40 ms at most, about as long
as a GPU takes to make 8 tokens of a small model.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from server.settings import Settings

AUTO_INTERVAL = 8
# vLLM pull request 49754: a chat request's own stream_interval (docs/notes.md).
PER_REQUEST_SINCE = (0, 32)


@dataclass(frozen=True)
class IntervalChoice:
    interval: Optional[int]  # None: vLLM's own (one token per event), the app asks per request
    reason: Optional[str]  # one line for `up`, when it sets one

    def applied(self, settings: Settings) -> Settings:
        """``settings`` with this interval where ERNIE_STREAM_INTERVAL is unset."""
        if settings.stream_interval is not None or self.interval is None:
            return settings
        return settings.model_copy(update={"stream_interval": self.interval})


def parse_version(text: str) -> Optional[tuple[int, int]]:
    """(major, minor) of a version string such as ``0.26.0`` or ``0.33.1+cu130``; None if not one."""
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def auto_interval(device: str, vllm_version: Optional[tuple[int, int]]) -> IntervalChoice:
    """The engine-wide interval for ``vllm_version`` on ``device``: grouped only on a GPU (a CPU
    engine's 5-40 tokens/s per chat would show in steps) whose vLLM cannot group per request."""
    if device != "cuda" or vllm_version is None or vllm_version >= PER_REQUEST_SINCE:
        return IntervalChoice(None, None)
    version = ".".join(map(str, vllm_version))
    return IntervalChoice(AUTO_INTERVAL, (
        f"vLLM {version} groups no tokens per request (0.32 added that), so it sends "
        f"{AUTO_INTERVAL} per event after the first for every chat: 1/{AUTO_INTERVAL} of the "
        f"events for its API servers and the app to handle (ERNIE_STREAM_INTERVAL sets it)"))


def installed_vllm(python: Path | str) -> Optional[tuple[int, int]]:
    """The version of vLLM that ``python`` imports, read from its metadata (no import of vLLM);
    None where it cannot be read."""
    try:
        done = subprocess.run([str(python), "-c", "from importlib.metadata import version; "
                               "print(version('vllm'))"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_version(done.stdout) if done.returncode == 0 else None


def choose(device: str, python: Path | str) -> IntervalChoice:
    """:func:`auto_interval` for the vLLM that ``python`` runs; probed on a GPU only."""
    return auto_interval(device, installed_vllm(python) if device == "cuda" else None)
