"""The two loops of a load level, run in the bench process (``run``) or shared over client
processes (``processes``).

The closed loop (``run_workers``): workers that each send one request after another, like
``vllm bench serve --max-concurrency`` with its default infinite request rate. The open loop
(``run_arrivals``, ``bench --request-rate``): requests arrive on a schedule
(``lib.arrivals``) whatever the server's pace, and wait for one of ``cap`` slots, like
``vllm bench serve --request-rate --max-concurrency``.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Iterator, Optional

from server.loadtest.lib.arrivals import arrival_times
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


def scheduled(cfg: BenchConfig, prompts: list[Prompt]) -> list[tuple[int, Prompt, float]]:
    """(index, prompt, arrival second) of an open-loop level: every level the same schedule."""
    times = arrival_times(len(prompts), cfg.request_rate, cfg.burstiness, random.Random(cfg.load.seed))
    return [(i, p, t) for (i, p), t in zip(enumerate(prompts), times)]


async def run_arrivals(cfg: BenchConfig, model: str, todo: list[tuple[int, Prompt, float]], cap: int,
                       concurrency: int, ignore_eos: bool, deadline: float, started: float,
                       records: list[RequestRecord]) -> None:
    """The prompts of ``todo`` (index, prompt, arrival second) each released at its arrival
    second from ``started`` (``time.perf_counter``), then sent as soon as fewer than ``cap``
    are in flight, until ``deadline``. A record keeps both times: ``arrival_s`` (when it was
    released) and ``start_s`` (when it was sent); TTFT counts from the sending, as vLLM's. As
    in ``run_workers``, requests running at the deadline are cancelled and recorded as
    failed, ones not sent by then are not recorded. Connections are kept for reuse: at most
    ``cap`` are open at once."""
    slots = asyncio.Semaphore(cap)
    idle: list[StreamConnection] = []
    tasks: list[asyncio.Task] = []

    async def one(index: int, prompt: Prompt, arrival_s: float) -> None:
        async with slots:
            if time.monotonic() >= deadline:
                return
            conn = idle.pop() if idle else StreamConnection(cfg.url, cfg.api_key, cfg.request_timeout_s)
            record = RequestRecord(index, concurrency, prompt.prompt_tokens, prompt.max_tokens,
                                   start_s=time.perf_counter() - started, arrival_s=arrival_s)
            records.append(record)
            try:
                await send(conn, completion_body(model, prompt, ignore_eos, cfg.sampling), record)
            except BaseException:
                conn.close()
                raise
            idle.append(conn)

    async def arrive() -> None:
        for index, prompt, at in todo:
            wait = started + at - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            if time.monotonic() >= deadline:
                return
            tasks.append(asyncio.create_task(one(index, prompt, time.perf_counter() - started)))

    arrivals = asyncio.create_task(arrive())
    try:
        await asyncio.wait_for(asyncio.shield(arrivals), max(0.0, deadline - time.monotonic()))
        pending: Optional[set] = set(tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
    except asyncio.TimeoutError:
        pending = set(tasks)
    arrivals.cancel()
    for task in pending or ():
        task.cancel()
    await asyncio.gather(arrivals, *tasks, return_exceptions=True)
    for conn in idle:
        conn.close()
    for record in records:
        if not record.success and not record.error:
            record.error = "cancelled at the time limit (--max-seconds)"
