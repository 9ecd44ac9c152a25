"""The CPU a request costs the app's HTTP client on a new connection and on a kept one.

    .venv/bin/python benchmarks/app-cost-cpu/connection_reuse.py --engine http://127.0.0.1:8000 \
        --requests 128 --rounds 5

Each round sends ``--requests`` GETs of the engine's /health at once through aiohttp (the
transport of the chat's OpenAI client), first on fresh connections (a new connector), then
again on the ones just kept, and reads this process's CPU over each. Why it matters: a
chat's next message comes after its reader's pause, and whether that finds its connection
still open is the keep-alive's choice (``ERNIE_ENGINE_KEEPALIVE_S``, docs/notes.md,
"Keep-alive race").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from server.loadtest.chat.cost import spread  # noqa: E402
from server.loadtest.lib.cpu import process_cpu_s  # noqa: E402


async def burst(session: aiohttp.ClientSession, url: str, n: int) -> float:
    """CPU ms per request for ``n`` requests at once."""
    async def one() -> None:
        async with session.get(url) as response:
            await response.read()
    before = process_cpu_s(os.getpid())
    await asyncio.gather(*(one() for _ in range(n)))
    return 1000 * (process_cpu_s(os.getpid()) - before) / n


async def one_round(url: str, n: int) -> tuple[float, float]:
    connector = aiohttp.TCPConnector(limit=1000, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector) as session:
        return await burst(session, url, n), await burst(session, url, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    url = f"{args.engine}/health"
    asyncio.run(one_round(url, 8))  # imports, the resolver's first answer: not measured
    rounds = [asyncio.run(one_round(url, args.requests)) for _ in range(args.rounds)]
    for i, (new, kept) in enumerate(rounds, 1):
        print(f"round {i}: new connections {new:.3f} ms, kept {kept:.3f} ms of CPU per request")
    summary = {"new": spread([r[0] for r in rounds]), "kept": spread([r[1] for r in rounds])}
    for label, s in summary.items():
        print(f"{label}: {s['mean']:.3f} ms (min {s['min']:.3f}, max {s['max']:.3f})")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "connection-reuse.json").write_text(json.dumps(
            {"requests": args.requests, "rounds": rounds, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
