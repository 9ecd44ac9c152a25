"""The usage records' writer (app/chat_records.py) on a chat database: what a reply waits for
its row (the queueing), and how fast the rows reach the database, in how many statements.

    .venv/bin/python benchmarks/usage_records.py [--rows 5000] [--per-tick 8] [--db PATH_OR_URL]

Rows arrive ``--per-tick`` at a time, then the event loop turns once, as replies end among
other chats' work.  ``--db``: a SQLite file (default: a new one in a temporary folder) or a
PostgreSQL URL, set up as the app sets it up (server/chat_db.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CHAINLIT_APP_ROOT", str(ROOT))  # Chainlit's config, not one made in the cwd

from app import chat_records  # noqa: E402
from app.kept.saved_chats import data_layer  # noqa: E402
from server import chat_db  # noqa: E402
from server.chat_records import INSERT_USAGE, usage_row  # noqa: E402


async def run(target: str, rows: int, per_tick: int) -> None:
    chat_db.prepare_db(target)
    layer = data_layer(target)
    writer = chat_records.Writer()
    writer.engine_of = lambda: layer.engine
    batches = 0
    write = writer._write

    async def counted(batch):
        nonlocal batches
        batches += 1
        await write(batch)
    writer._write = counted
    waits = []
    started = time.perf_counter()
    for n in range(rows):
        began = time.perf_counter()
        writer.add(INSERT_USAGE, usage_row("bench", 100 + n % 50, 200, 0.05, 40.0, "length"))
        waits.append(time.perf_counter() - began)
        if n % per_tick == per_tick - 1:
            await asyncio.sleep(0)
    queued = time.perf_counter() - started
    while writer.task is not None and not writer.task.done():
        await writer.task
    written = time.perf_counter() - started
    await layer.engine.dispose()
    waits.sort()
    print(f"{rows} rows, {per_tick} per loop turn, into {chat_db.without_password(target)}")
    print(f"  a reply waits for its row: median {statistics.median(waits) * 1e6:.1f} us, "
          f"p99 {waits[int(len(waits) * 0.99)] * 1e6:.1f} us, max {waits[-1] * 1e6:.1f} us")
    print(f"  all queued in {queued:.3f} s; all written in {written:.3f} s "
          f"({rows / written:,.0f} rows/s), in {batches} batches")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--per-tick", type=int, default=8)
    parser.add_argument("--db", help="a SQLite file or a PostgreSQL URL (default: a new SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(args.db or str(Path(tmp) / "chats.db"), args.rows, args.per_tick))


if __name__ == "__main__":
    main()
