"""A qa-load burst from several client processes: ``qa-load --sessions N --processes K``.

One asyncio process drives every chat's socket, and at a thousand chats it becomes part of
what it measures: on the H200, one process opening 1,000 chats saw a TTFT p50 of 778-940 ms
where four processes of 250 saw 433-533 ms on the same stack (docs/gpu-crowd.md, "fifth
session"). Here each process (``qa-load --json`` with a hidden flag) opens its share of the
chats, says so on stderr and waits; once all have, each is told on stdin to send, so the
burst stays one burst. Their chats are merged into one result and judged together: a
message id that reached chats of two processes is still crossed (``qa_load.merge``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Optional

from server.loadtest.chat_socket import QaLoadError
from server.paths import ROOT
from server.progress import StatusLine

MAX_PROCESSES = 16
READY = "qa-load: chats open, waiting for the others to send"
GO_FLAG = "--send-on-stdin"  # the hidden flag of a client process


def shares(sessions: int, processes: int) -> list[int]:
    """``sessions`` chats over ``processes`` clients, sizes one apart at most."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise QaLoadError(f"--processes must be between 1 and {MAX_PROCESSES}.")
    if processes > sessions:
        raise QaLoadError(f"--processes {processes} is more than --sessions {sessions}: "
                          "each process needs at least one chat.")
    base, extra = divmod(sessions, processes)
    return [base + (i < extra) for i in range(processes)]


# --- the whole run ----------------------------------------------------------------------

async def wait_until_sent() -> None:
    """A client process's side: say its chats are open, then wait for the word to send."""
    print(READY, file=sys.stderr, flush=True)
    await asyncio.to_thread(sys.stdin.readline)


async def run_processes(url: str, sessions: int, processes: int, timeout_s: float,
                        prompts_file: Optional[Path]) -> list[dict]:
    """Each client process's ``--json`` result, once every one has sent and finished."""
    sizes = shares(sessions, processes)
    command = [sys.executable, "-m", "server.cli", "qa-load", "--url", url, "--json", GO_FLAG,
               "--timeout-s", f"{timeout_s:g}"] + (["--prompts-file", str(prompts_file)] if prompts_file else [])
    clients = [await asyncio.create_subprocess_exec(
        *command, "--sessions", str(size), cwd=ROOT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE) for size in sizes]
    status = StatusLine("qa-load", stream=sys.stderr, plain_every_s=5.0)
    ready = [asyncio.Event() for _ in clients]
    last_words = [""] * len(clients)

    async def watch(i: int) -> None:  # each client's stderr: its ready line, its last error
        async for raw in clients[i].stderr:
            line = raw.decode(errors="replace").strip()
            if line == READY:
                ready[i].set()
            elif line:
                last_words[i] = line

    watchers = [asyncio.create_task(watch(i)) for i in range(len(clients))]
    outputs = [asyncio.create_task(c.stdout.read()) for c in clients]
    try:
        while not all(e.is_set() for e in ready):
            dead = [i for i, c in enumerate(clients) if c.returncode is not None and not ready[i].is_set()]
            if dead:
                raise QaLoadError(f"client process {dead[0] + 1} of {len(clients)} stopped before its "
                                  f"chats were open: {last_words[dead[0]] or 'no message'}")
            status.update(f"{sessions} chats in {len(clients)} processes: "
                          f"{sum(e.is_set() for e in ready)} have theirs open")
            await asyncio.sleep(0.2)
        for client in clients:  # all at once: one burst
            client.stdin.write(b"go\n")
        await asyncio.gather(*(c.stdin.drain() for c in clients))
        status.update(f"{len(clients)} processes: every chat sent")
        texts = await asyncio.gather(*outputs)
        await asyncio.gather(*(c.wait() for c in clients), *watchers)
    finally:
        for client in clients:
            if client.returncode is None:
                client.kill()
                await client.wait()
    results = []
    for i, text in enumerate(texts):
        if not text.strip():
            raise QaLoadError(f"client process {i + 1} gave no result: {last_words[i] or 'no message'}")
        results.append(json.loads(text))
    status.done(f"{sessions} chats in {len(clients)} processes: all finished")
    return results
