"""App workers writing chat steps into one SQLite saved-chats file at once: how long a write
takes, and how many are lost.

    .venv/bin/python benchmarks/saved_chat_writes.py [--processes 8] [--chats 60] [--steps 5]
                                                     [--runs 3] [--config app] [--json]

Each process stands for an app worker: its chats save their steps at once, one after the
other in each chat, through Chainlit's SQLAlchemy data layer (``create_step``: the thread's
read and write, then the step's), as the chat saves a reply's messages.  The data layer is
the app's (``--config app``: app/kept/saved_chats.py, server/chat_db.engine_options and
SQLITE_PRAGMAS), or Chainlit's own engine (SQLAlchemy's defaults) on a file in write-ahead
log mode as server/chat_db.prepare_db leaves it (``chainlit-wal``: the app before it had
its own engine), or in SQLite's default rollback-journal mode (``chainlit``).
Chainlit only logs a write that fails, so the lost ones are counted in the file afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CHAINLIT_APP_ROOT", str(ROOT))  # Chainlit's config, not one made in the cwd

from server import chat_db  # noqa: E402

REPLY = "A reply of a few sentences, as a saved step holds it. " * 12


CONFIGS = ("app", "chainlit-wal", "chainlit")


def data_layer(path: Path, config: str):
    if config != "app":
        from chainlit.data.sql_alchemy import SQLAlchemyDataLayer
        return SQLAlchemyDataLayer(conninfo=chat_db.data_layer_url(path))
    from app.kept import saved_chats
    return saved_chats.data_layer(str(path))


def step(thread_id: str, index: int) -> dict:
    return {"id": str(uuid.uuid4()), "threadId": thread_id, "name": "Assistant",
            "type": "assistant_message" if index % 2 else "user_message", "output": REPLY,
            "streaming": False, "metadata": {"kind": "reply"},
            "createdAt": datetime.now(timezone.utc).isoformat()}


async def write_chats(path: Path, config: str, chats: int, steps: int) -> list[float]:
    """Every chat's steps, the chats at once; the seconds each write took."""
    from chainlit.context import init_http_context
    init_http_context()  # outside a websocket session Chainlit writes at once, unqueued
    layer = data_layer(path, config)
    took: list[float] = []

    async def chat() -> None:
        thread_id = str(uuid.uuid4())
        for index in range(steps):
            started = time.perf_counter()
            await layer.create_step(step(thread_id, index))
            took.append(time.perf_counter() - started)

    await asyncio.gather(*(chat() for _ in range(chats)))
    await layer.engine.dispose()
    return took


def worker(path: Path, config: str, chats: int, steps: int, start, results) -> None:
    logging.disable(logging.WARNING)  # Chainlit's warning for each lost write
    start.wait()  # every process has imported Chainlit: they write together
    results.put(asyncio.run(write_chats(path, config, chats, steps)))


def one_run(args, folder: Path) -> dict:
    path = folder / f"chats-{uuid.uuid4().hex[:8]}.db"
    if args.config == "chainlit":  # the tables only: SQLite's own journal mode
        db = sqlite3.connect(path)
        db.executescript(chat_db.SCHEMA)
        db.close()
    else:
        chat_db.prepare_db(str(path))
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(args.processes), spawn.Queue()
    workers = [spawn.Process(target=worker, args=(path, args.config, args.chats, args.steps,
                                                  start, results)) for _ in range(args.processes)]
    for process in workers:
        process.start()
    took = sorted(t for _ in workers for t in results.get())
    for process in workers:
        process.join()
    with sqlite3.connect(path) as db:
        saved = db.execute("SELECT count(*) FROM steps").fetchone()[0]
    return {"p50_ms": 1000 * took[len(took) // 2], "p99_ms": 1000 * took[int(len(took) * 0.99)],
            "writes": len(took), "dropped": args.processes * args.chats * args.steps - saved}


def spread(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs]
    return f"{statistics.mean(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8, help="app workers (default 8)")
    parser.add_argument("--chats", type=int, default=60, help="chats writing at once per worker (default 60)")
    parser.add_argument("--steps", type=int, default=5, help="steps each chat writes (default 5)")
    parser.add_argument("--runs", type=int, default=3, help="repeats, each on a new file (default 3)")
    parser.add_argument("--config", choices=CONFIGS, default="app",
                        help="the app's data layer (default), or Chainlit's own engine on a file in "
                             "WAL mode (chainlit-wal) or in SQLite's default journal mode (chainlit)")
    parser.add_argument("--json", action="store_true", help="the runs as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        runs = [one_run(args, Path(folder)) for _ in range(args.runs)]
    if args.json:
        print(json.dumps(runs))
        return
    print(f"--config {args.config}: {args.processes} processes x {args.chats} chats x {args.steps} steps, {args.runs} runs")
    for i, run in enumerate(runs, 1):
        print(f"  run {i}: p50 {run['p50_ms']:.0f} ms  p99 {run['p99_ms']:.0f} ms  dropped {run['dropped']}")
    print(f"mean (min-max): p50 {spread(runs, 'p50_ms')} ms  p99 {spread(runs, 'p99_ms')} ms  "
          f"dropped {spread(runs, 'dropped')} of {runs[0]['writes']}")


if __name__ == "__main__":
    main()
