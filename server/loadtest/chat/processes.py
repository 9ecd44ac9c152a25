"""A qa-load burst from several client processes: ``qa-load --sessions N --processes K``.

One asyncio process drives every chat's socket, and at a thousand chats it becomes part of
what it measures: on the H200, one process opening 1,000 chats saw a TTFT p50 of 778-940 ms
where four processes of 250 saw 433-533 ms on the same stack
(``8e59b31:benchmarks/gpu/h200/session-1202e/``). Here each process (``qa-load --json`` with
a hidden flag) opens its share of the chats, says so on stderr and waits; once all have, each
is told on stdin to send, so the burst stays one burst. Their chats are merged into one result and judged together: a
message id that reached chats of two processes is still crossed (``qa_load.merge``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Optional

from server.loadtest.lib.chat_socket import QaLoadError
from server.loadtest.lib.client_processes import MAX_PROCESSES, ClientProcesses, even_shares
from server.loadtest.lib.login import client_environment
from server.paths import ROOT
from server.progress import StatusLine

READY = "qa-load: chats open, waiting for the others to send"
GO_FLAG = "--send-on-stdin"  # the hidden flag of a client process


def shares(sessions: int, processes: int) -> list[int]:
    """``sessions`` chats over ``processes`` clients, sizes one apart at most."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise QaLoadError(f"--processes must be between 1 and {MAX_PROCESSES}.")
    if processes > sessions:
        raise QaLoadError(f"--processes {processes} is more than --sessions {sessions}: "
                          "each process needs at least one chat.")
    return even_shares(sessions, processes)


# --- the whole run ----------------------------------------------------------------------

async def wait_until_sent() -> None:
    """A client process's side: say its chats are open, then wait for the word to send."""
    print(READY, file=sys.stderr, flush=True)
    await asyncio.to_thread(sys.stdin.readline)


async def run_processes(url: str, sessions: int, processes: int, timeout_s: float,
                        prompts_file: Optional[Path], cookie: str = "",
                        model: Optional[str] = None) -> list[dict]:
    """Each client process's ``--json`` result, once every one has sent and finished.
    ``cookie``: the run's login, handed over in the environment (``login.COOKIE_ENV``);
    ``model``: qa-load's --model, which each process resolves as the run did."""
    sizes = shares(sessions, processes)
    command = [sys.executable, "-m", "server.cli", "qa-load", "--url", url, "--json", GO_FLAG,
               "--timeout-s", f"{timeout_s:g}"] + (["--prompts-file", str(prompts_file)] if prompts_file else []) + (
               ["--model", model] if model else [])
    status = StatusLine("qa-load", stream=sys.stderr, plain_every_s=5.0)
    async with ClientProcesses([command + ["--sessions", str(size)] for size in sizes], ROOT, READY,
                               QaLoadError, "client process",
                               env=client_environment(cookie, os.environ)) as group:
        await group.wait_ready(lambda n: status.update(
            f"{sessions} chats in {len(sizes)} processes: {n} have theirs open"))
        await group.tell(["go"] * len(sizes))  # all at once: one burst
        status.update(f"{len(sizes)} processes: every chat sent")
        texts = await group.results(lambda: None)
    status.done(f"{sessions} chats in {len(sizes)} processes: all finished")
    return [json.loads(text) for text in texts]
