"""Running the load: the warm-up, one concurrency level, then every level of a run.

A level is a closed loop (``workers``): ``concurrency`` workers each send one request
after another until the level's prompts are used up or the time limit is reached, in
this process or shared over several (``bench --processes``: ``processes``). With
``--request-rate`` it is an open loop: the prompts arrive on a schedule (``lib.arrivals``,
the same at every level, drawn from the load's seed) and each waits for one of
``concurrency`` slots (none without --concurrency).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from server.loadtest.lib.arrivals import achieved_rate, mean_gap
from server.loadtest.lib.config import BenchConfig, BenchError, Prompt
from server.loadtest.lib.prompts import prepare, prompts_sharegpt
from server.loadtest.lib.stats import LevelSummary, RequestRecord, summarize_level
from server.loadtest.lib.stream import StreamConnection, completion_body, send
from server.loadtest.lib.target import add_server_view, server_counters
from server.loadtest.bench.workers import run_arrivals, run_workers, scheduled
from server.progress import StatusLine

WARMUP_MAX_TOKENS = 16


@dataclass
class Level:
    """One concurrency level of a run: its summary and every request's record."""

    concurrency: int
    summary: LevelSummary
    records: list[dict] = field(default_factory=list)  # RequestRecord.as_dict(), as saved

    def as_dict(self) -> dict:
        return {"concurrency": self.concurrency, "summary": self.summary.as_dict(),
                "records": self.records}


@dataclass
class BenchResult:
    """A whole run, as bench.json keeps it (``as_dict``) and reads it back (``from_dict``)."""

    started: str
    target: dict            # url, model, max_model_len
    params: dict            # the BenchConfig, what was sent, how lengths were counted
    levels: list[Level] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # command line, arguments, vllm comparison

    KIND = "ernie-chat bench"

    @property
    def completed(self) -> int:
        return sum(level.summary.completed for level in self.levels)

    def as_dict(self) -> dict:
        return {"kind": self.KIND, "started": self.started, "target": self.target,
                "params": self.params, "levels": [l.as_dict() for l in self.levels], **self.extra}

    @classmethod
    def from_dict(cls, data: dict) -> "BenchResult":
        levels = [Level(l["concurrency"], LevelSummary.from_dict(l["summary"]), l.get("records", []))
                  for l in data.get("levels", [])]
        known = {"kind", "started", "target", "params", "levels"}
        return cls(data.get("started", ""), data.get("target", {}), data.get("params", {}), levels,
                   {k: v for k, v in data.items() if k not in known})


async def warm_up(conn: StreamConnection, cfg: BenchConfig, model: str,
                  prompts: list[Prompt], out) -> bool:
    """Send the warm-up requests; return whether the server takes ``ignore_eos``.

    A server that rejects the field (plain OpenAI-compatible servers may) is
    asked again without it, and the bench goes on without it, saying so.
    """
    ignore_eos = cfg.ignore_eos
    # A few tokens show that the server works; a long warm-up reply would only cost time.
    prompts = [replace(p, max_tokens=min(p.max_tokens, WARMUP_MAX_TOKENS)) for p in prompts]
    for i, prompt in enumerate(prompts):
        record = RequestRecord(-1, 0, prompt.prompt_tokens, prompt.max_tokens)
        await send(conn, completion_body(model, prompt, ignore_eos, cfg.sampling), record)
        if not record.success and i == 0 and ignore_eos and record.error.startswith("HTTP 4"):
            ignore_eos = False
            record = RequestRecord(-1, 0, prompt.prompt_tokens, prompt.max_tokens)
            await send(conn, completion_body(model, prompt, False, cfg.sampling), record)
            if record.success:
                out("[bench] the server rejects ignore_eos: replies may end before max_tokens")
        if not record.success:
            raise BenchError(f"The warm-up request to {cfg.url} failed: {record.error}")
    return ignore_eos


# --- one concurrency level ----------------------------------------------------------

def level_name(cfg: BenchConfig, concurrency: int) -> str:
    """A level as the status line names it: its concurrency, or its rate and cap."""
    if not cfg.open_loop:
        return f"concurrency {concurrency}"
    return f"{cfg.request_rate:g} req/s" + ("" if cfg.uncapped else f" (at most {concurrency} in flight)")


def progress_text(records: list[RequestRecord], total: int, concurrency: int, width: int = 20,
                  name: str = "") -> str:
    finished = [r for r in records if r.success or r.error]
    filled = round(width * len(finished) / total) if total else width
    failed = sum(1 for r in finished if not r.success)
    tokens = sum(r.output_tokens for r in finished)
    return (f"{name or f'concurrency {concurrency}'} [{'#' * filled}{'.' * (width - filled)}] "
            f"{len(finished)}/{total}  {tokens} tokens" + (f"  {failed} failed" if failed else ""))


async def run_level(cfg: BenchConfig, model: str, prompts: list[Prompt], concurrency: int,
                    ignore_eos: bool, deadline: float,
                    status: StatusLine) -> tuple[list[RequestRecord], float]:
    """All ``prompts`` with at most ``concurrency`` in flight, stopped at ``deadline``."""
    records: list[RequestRecord] = []
    started = time.perf_counter()

    async def tick() -> None:
        while True:
            status.update(progress_text(records, len(prompts), concurrency,
                                        name=level_name(cfg, concurrency)))
            await asyncio.sleep(0.5)

    ticker = asyncio.create_task(tick())
    try:
        if cfg.open_loop:
            await run_arrivals(cfg, model, scheduled(cfg, prompts), concurrency, concurrency,
                               ignore_eos, deadline, started, records)
        else:
            await run_workers(cfg, model, iter(enumerate(prompts)), min(concurrency, len(prompts)),
                              concurrency, ignore_eos, deadline, started, records)
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
    return records, time.perf_counter() - started


def add_arrivals(summary: LevelSummary, records: list[RequestRecord], cfg: BenchConfig) -> None:
    """The open loop's figures: the rate asked and achieved, the mean gap between arrivals
    and how long requests waited for a slot, from the records' own times."""
    if not cfg.open_loop:
        return
    arrivals = [r.arrival_s for r in records if r.arrival_s is not None]
    waits = [r.start_s - r.arrival_s for r in records if r.arrival_s is not None]
    gap = mean_gap(arrivals)
    summary.request_rate, summary.burstiness = cfg.request_rate, cfg.burstiness
    summary.achieved_request_rate = achieved_rate(arrivals)
    summary.mean_interarrival_ms = None if gap is None else gap * 1000
    summary.client_wait_ms_mean = sum(waits) / len(waits) * 1000 if waits else None


async def run_bench(cfg: BenchConfig, out=print, prompts_file: Optional[Path] = None) -> BenchResult:
    """Every concurrency level of ``cfg``; the result as saved in bench.json.

    ``cfg.max_seconds`` bounds the load itself, from the first measured request on;
    building the prompts and the warm-up come before it.  ``prompts_file`` receives the
    measured prompts, so that another tool can send exactly the same load.
    """
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    levels = list(cfg.concurrencies)
    status = StatusLine("bench")
    # Every level gets prompts of its own: repeated ones would be served from the prefix cache.
    model, max_model_len, prompts, counted_by = await prepare(
        cfg, cfg.load.num_prompts * len(levels) + cfg.warmup, random.Random(cfg.load.seed), status)
    if prompts_file is not None:
        prompts_file.parent.mkdir(parents=True, exist_ok=True)
        prompts_file.write_text(prompts_sharegpt(prompts[cfg.warmup:]), encoding="utf-8")
    conn = StreamConnection(cfg.url, cfg.api_key, cfg.request_timeout_s)
    try:
        ignore_eos = await warm_up(conn, cfg, model, prompts[:cfg.warmup], out)
    finally:
        conn.close()
    deadline = time.monotonic() + cfg.max_seconds
    status.done(f"{model} at {cfg.url}: {len(prompts) - cfg.warmup} prompts ready, "
                f"lengths counted by the {counted_by}")
    results = []
    for n, concurrency in enumerate(levels):
        if time.monotonic() >= deadline:
            skipped = ", ".join(map(str, levels[n:]))
            out(f"[bench] time limit reached: concurrency {skipped} not run")
            break
        first = cfg.warmup + n * cfg.load.num_prompts
        status = StatusLine("bench")
        server_before = await server_counters(cfg)
        cpu_before = time.process_time()
        level_prompts = prompts[first:first + cfg.load.num_prompts]
        if cfg.processes > 1:
            from server.loadtest.bench import processes as bench_processes
            records, duration, cpu_s = await bench_processes.run_level(
                cfg, model, level_prompts, concurrency, ignore_eos, deadline, status)
        else:
            records, duration = await run_level(cfg, model, level_prompts, concurrency,
                                                ignore_eos, deadline, status)
            cpu_s = time.process_time() - cpu_before
        summary = summarize_level(records, duration, cfg.slo)
        add_arrivals(summary, records, cfg)
        add_server_view(summary, server_before, await server_counters(cfg))
        # A saturated client measures itself, not the server: say so in the result (with
        # several client processes, the busiest one's share of its core).
        summary.client_cpu_fraction = cpu_s / duration
        summary.not_sent = cfg.load.num_prompts - len(records)
        status.done(progress_text(records, cfg.load.num_prompts, concurrency,
                                  name=level_name(cfg, concurrency)) + f" in {duration:.1f} s"
                    + (f" from {cfg.processes} client processes" if cfg.processes > 1 else ""))
        results.append(Level(concurrency, summary, [r.as_dict() for r in records]))
    return BenchResult(started, {"url": cfg.url, "model": model, "max_model_len": max_model_len},
                       {**cfg.as_dict(), "ignore_eos_sent": ignore_eos, "prompt_lengths": counted_by},
                       results)
