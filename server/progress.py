"""Live one-line status for long steps (installs, model builds, engine start-up).

A step's full output goes to a log file; the terminal shows one line that is
rewritten in place with the elapsed time and the latest thing the step said,
so a first run that takes minutes never looks hung.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from server.errors import ErnieChatError


class StepFailed(ErnieChatError, RuntimeError):
    """A set-up step (an install, the demo model's build) failed; its log says why."""


class StatusLine:
    """Rewrites one terminal line; prints plain lines every few seconds when not a TTY."""

    def __init__(self, label: str, stream=None, plain_every_s: float = 15.0):
        self.label = label
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self.plain_every_s = plain_every_s
        self._last_plain = -plain_every_s
        self._lock = threading.Lock()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, detail: str = "") -> None:
        with self._lock:
            text = f"[{self.label}] {self.elapsed:5.0f} s  {detail.strip()}"
            if self.tty:
                width = shutil.get_terminal_size((100, 20)).columns - 1
                self.stream.write("\r" + text[:width].ljust(width))
                self.stream.flush()
            elif self.elapsed - self._last_plain >= self.plain_every_s:
                self._last_plain = self.elapsed
                print(text[:160], file=self.stream, flush=True)

    def done(self, message: str) -> None:
        with self._lock:
            if self.tty:
                self.stream.write("\r" + " " * (shutil.get_terminal_size((100, 20)).columns - 1) + "\r")
            print(f"[{self.label}] {message} ({self.elapsed:.0f} s)", file=self.stream, flush=True)


def run_step(
    argv: Sequence[str],
    label: str,
    log_path: Path,
    *,
    cwd: Optional[Path] = None,
    env: Optional[dict] = None,
    done_message: str = "done",
) -> None:
    """Run ``argv`` to completion, its output in ``log_path``, with a live status line."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    status = StatusLine(label)
    last = [""]
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {label}: {' '.join(argv)}\n")
        log.flush()
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        )
        ticker = threading.Thread(target=_tick, args=(proc, status, last), daemon=True)
        ticker.start()
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                if line.strip():
                    last[0] = line.strip()
            proc.wait()
        except BaseException:  # Ctrl-C or SIGTERM mid-step: leave no half-done child behind
            proc.kill()
            proc.wait()
            raise
        finally:
            ticker.join()
    if proc.returncode != 0:
        status.done(f"FAILED with exit code {proc.returncode}")
        raise StepFailed(f"{label} failed (exit {proc.returncode}); last output: {last[0]!r}. "
                         f"Full output: {log_path}")
    status.done(done_message)


def _tick(proc: subprocess.Popen, status: StatusLine, last: list) -> None:
    while proc.poll() is None:
        status.update(last[0])
        time.sleep(1.0)
