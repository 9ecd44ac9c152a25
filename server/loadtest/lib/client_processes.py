"""Load-client processes that start together: what ``qa-load --processes`` (bursts,
``chat.processes``; users, ``users.processes``, as ``capacity --processes``) and ``bench
--processes`` (``bench.processes``) share.

Each child is a command that is told on stdin what to do. It prints a ready line on stderr
once it is set, and waits for one more line on stdin ("go ...") before it sends anything, so
that the children's loads form one burst. Its result is its stdout. A child that stops before
it is ready, or that gives no result, stops the run with the last thing it said.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Awaitable, Callable, Optional

MAX_PROCESSES = 16


def even_shares(total: int, parts: int) -> list[int]:
    """``total`` over ``parts``, sizes one apart at most, the larger first."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


class ClientProcesses:
    """``async with ClientProcesses(...) as group``: the children, killed on the way out if
    they are still running (an error, Ctrl-C)."""

    def __init__(self, commands: list[list[str]], cwd: Path, ready_line: str, error: type[Exception],
                 name: str, on_line: Optional[Callable[[int, str], bool]] = None,
                 env: Optional[dict[str, str]] = None):
        self.commands, self.cwd, self.ready_line, self.env = commands, cwd, ready_line, env
        self.error, self.name = error, name
        self.on_line = on_line  # (child, line) -> True when it was the child's progress, not news
        self.procs: list[asyncio.subprocess.Process] = []
        self.ready: list[asyncio.Event] = []
        self.last_words: list[str] = []
        self.outputs: list[asyncio.Task] = []
        self.watchers: list[asyncio.Task] = []

    async def __aenter__(self) -> "ClientProcesses":
        for command in self.commands:
            self.procs.append(await asyncio.create_subprocess_exec(
                *command, cwd=self.cwd, env=self.env, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE))
        self.ready = [asyncio.Event() for _ in self.procs]
        self.last_words = [""] * len(self.procs)
        self.watchers = [asyncio.create_task(self._watch(i)) for i in range(len(self.procs))]
        self.outputs = [asyncio.create_task(p.stdout.read()) for p in self.procs]
        return self

    async def __aexit__(self, *exc) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    async def _watch(self, i: int) -> None:  # a child's stderr: its ready line, its last words
        async for raw in self.procs[i].stderr:
            line = raw.decode(errors="replace").strip()
            if line == self.ready_line:
                self.ready[i].set()
            elif line and not (self.on_line and self.on_line(i, line)):
                self.last_words[i] = line

    def said(self, i: int) -> str:
        return self.last_words[i] or "no message"

    async def tell(self, lines: list[str]) -> None:
        """One line to each child, all written before any is waited for."""
        for proc, line in zip(self.procs, lines):
            proc.stdin.write(line.encode() + b"\n")
        await asyncio.gather(*(p.stdin.drain() for p in self.procs))

    async def wait_ready(self, show: Callable[[int], None]) -> None:
        """Until every child is ready; ``show(how many are)`` meanwhile."""
        while not all(e.is_set() for e in self.ready):
            dead = [i for i, p in enumerate(self.procs) if p.returncode is not None and not self.ready[i].is_set()]
            if dead:
                raise self.error(f"{self.name} {dead[0] + 1} of {len(self.procs)} stopped before it "
                                 f"was ready: {self.said(dead[0])}")
            show(sum(e.is_set() for e in self.ready))
            await asyncio.sleep(0.05)

    async def results(self, show: Callable[[], None]) -> list[str]:
        """Every child's stdout once all have finished; ``show()`` twice a second meanwhile."""
        while not all(o.done() for o in self.outputs):
            show()
            await asyncio.wait(self.outputs, timeout=0.5)
        await asyncio.gather(*(p.wait() for p in self.procs), *self.watchers)
        texts = [o.result().decode() for o in self.outputs]
        for i, text in enumerate(texts):
            if not text.strip():
                raise self.error(f"{self.name} {i + 1} gave no result: {self.said(i)}")
        return texts


# --- the child's side -------------------------------------------------------------------

async def parent_line() -> str:
    """The next line from the parent, on a client process's stdin."""
    text = await asyncio.to_thread(sys.stdin.readline)
    if not text:
        raise EOFError("the parent process closed stdin")
    return text


def child_main(client: Callable[[], Awaitable[dict]], label: str) -> int:
    """Run a client process: its result as JSON on stdout, or why not as its last words."""
    try:
        result = asyncio.run(client())
    except Exception as exc:  # noqa: BLE001  (the parent shows it as this client's last words)
        print(f"{label}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2
    sys.stdout.write(json.dumps(result))
    return 0
