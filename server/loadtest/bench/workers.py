"""The closed loop of a load level: workers that each send one request after another.

Like ``vllm bench serve --max-concurrency`` with its default infinite request rate. A level
runs it in the bench process (``run``) or shared over client processes (``processes``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

from server.loadtest.lib.config import BenchConfig, Prompt
from server.loadtest.lib.stats import RequestRecord
from server.loadtest.lib.stream import StreamConnection, completion_body, send


async def run_workers(cfg: BenchConfig, model: str, todo: Iterator[tuple[int, Prompt]], workers: int,
                      concurrency: int, ignore_eos: bool, deadline: float, started: float,
                      records: list[RequestRecord]) -> None:
    """``workers`` closed-loop workers sending the prompts of ``todo`` (each taken once) until
    it is empty or ``deadline``; requests still running then are cancelled (which closes their
    streams) and recorded as failed, ones never started are not recorded. ``start_s`` counts
    from ``started`` (``time.perf_counter``)."""

    async def worker() -> None:
        conn = StreamConnection(cfg.url, cfg.api_key, cfg.request_timeout_s)
        try:
            for index, prompt in todo:
                if time.monotonic() >= deadline:
                    return
                record = RequestRecord(index, concurrency, prompt.prompt_tokens, prompt.max_tokens,
                                       start_s=time.perf_counter() - started)
                records.append(record)
                await send(conn, completion_body(model, prompt, ignore_eos, cfg.sampling), record)
        finally:
            conn.close()

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    _, late = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    for record in records:
        if not record.success and not record.error:
            record.error = "cancelled at the time limit (--max-seconds)"
