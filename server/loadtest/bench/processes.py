"""A bench level from several client processes: ``bench --processes K``.

One asyncio process reads every stream of a level, and with a thousand in flight it is part
of what it measures. On the H200, 1,000 requests sent by one bench process saw a TTFT p50 of
622-772 ms (three runs, ``8e59b31:benchmarks/gpu/h200/session-1202d/crowd-repeat/``). Sent by
four processes of 250, they saw 230-435 ms (four runs on two lent machines,
``8e59b31:benchmarks/gpu/h200/session-1202e/clients-both/`` and
``session-1202f/machine-b/clients-both/``).

Here a level's workers are shared over K client processes (``python -m
server.loadtest.bench.processes``, which imports only the load tools). Each is told on stdin
what to send: its workers and their prompts, dealt as one process's workers would take them.
It says on stderr when it is ready, and all start on one "go". Each times its requests from
its "go", sends its records on stdout, and reports its CPU time. The level is then
summarized from every record as if one process had sent them all.

An open-loop level (``--request-rate``) is shared the same way: the schedule is drawn once,
arrival ``i`` goes to process ``i mod K`` with its arrival second, and the slots of
``--concurrency`` are shared as evenly as the workers are. Every process counts its
arrivals from its own "go", which all receive within a few milliseconds: the common clock.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from server.loadtest.lib.client_processes import ClientProcesses, child_main, even_shares, parent_line
from server.loadtest.lib.config import BenchConfig, BenchError, Prompt
from server.loadtest.lib.stats import RequestRecord
from server.loadtest.bench.workers import run_arrivals, run_workers, scheduled
from server.paths import ROOT
from server.progress import StatusLine

READY = "bench: ready"
FINISHED = "bench: finished "


def deal(prompts: list[Prompt], concurrency: int, processes: int) -> list[tuple[int, list[tuple[int, Prompt]]]]:
    """Each process's (workers, [(index, prompt)]): worker ``w`` of the level takes prompts
    ``w, w + C, w + 2C ...`` as the workers of one process would when replies take alike,
    and each process gets the prompts of its workers, in order."""
    workers = min(concurrency, len(prompts))
    if processes > workers:
        raise BenchError(f"--processes {processes} is more than the {workers} requests in flight "
                         "at this level: each client process needs at least one.")
    out, first = [], 0
    for size in even_shares(workers, processes):
        mine = set(range(first, first + size))
        out.append((size, [(i, p) for i, p in enumerate(prompts) if i % workers in mine]))
        first += size
    return out


def deal_arrivals(todo: list[tuple[int, Prompt, float]], cap: int,
                  processes: int) -> list[tuple[int, list[tuple[int, Prompt, float]]]]:
    """Each process's (slots, [(index, prompt, arrival second)]) of an open-loop level:
    arrivals dealt in turn, the ``cap`` slots shared evenly."""
    if processes > min(cap, len(todo)):
        raise BenchError(f"--processes {processes} is more than the {min(cap, len(todo))} requests "
                         "that may be in flight at this level: each client process needs at least one.")
    return [(slots, todo[k::processes]) for k, slots in enumerate(even_shares(cap, processes))]


def spec(cfg: BenchConfig, model: str, concurrency: int, ignore_eos: bool, workers: int,
         prompts: list[tuple]) -> str:
    """What one client process is told to send (its first line on stdin: the API key goes
    there, never on a command line)."""
    return json.dumps({"url": cfg.url, "api_key": cfg.api_key, "timeout_s": cfg.request_timeout_s,
                       "temperature": cfg.temperature, "top_p": cfg.top_p, "model": model,
                       "concurrency": concurrency, "ignore_eos": ignore_eos, "workers": workers,
                       "open_loop": cfg.open_loop,
                       "prompts": [[i, p.text, p.prompt_tokens, p.max_tokens, *at] for i, p, *at in prompts]})


async def run_level(cfg: BenchConfig, model: str, prompts: list[Prompt], concurrency: int,
                    ignore_eos: bool, deadline: float,
                    status: StatusLine) -> tuple[list[RequestRecord], float, float]:
    """(every record, the level's seconds, the busiest client process's CPU seconds)."""
    if cfg.open_loop:
        shares = deal_arrivals(scheduled(cfg, prompts), concurrency, cfg.processes)
    else:
        shares = deal(prompts, concurrency, cfg.processes)
    finished = [0] * len(shares)

    def progress(i: int, line: str) -> bool:
        if line.startswith(FINISHED):
            finished[i] = int(line.split()[-1])
            return True
        return False

    command = [sys.executable, "-m", "server.loadtest.bench.processes"]
    async with ClientProcesses([command] * len(shares), ROOT, READY, BenchError,
                               "bench client process", progress) as group:
        await group.tell([spec(cfg, model, concurrency, ignore_eos, workers, mine)
                          for workers, mine in shares])
        await group.wait_ready(lambda n: status.update(f"{n} of {len(shares)} client processes ready"))
        started = time.perf_counter()
        await group.tell([f"go {max(0.0, deadline - time.monotonic()):.3f}"] * len(shares))
        texts = await group.results(lambda: status.update(
            f"concurrency {concurrency} in {len(shares)} processes: {sum(finished)}/{len(prompts)} finished"))
        duration = time.perf_counter() - started
    results = [json.loads(text) for text in texts]
    records = sorted((record_from_dict(r) for result in results for r in result["records"]),
                     key=lambda r: r.start_s)
    return records, duration, max(result["cpu_s"] for result in results)


def record_from_dict(data: dict) -> RequestRecord:
    return RequestRecord(**{k: v for k, v in data.items() if k != "tpot_s"})


# --- a client process -------------------------------------------------------------------

async def client() -> dict:
    """Read the spec, say ready, wait for "go SECONDS_LEFT", send, return the records."""
    task = json.loads(await parent_line())
    cfg = BenchConfig(url=task["url"], api_key=task["api_key"], model=task["model"],
                      request_timeout_s=task["timeout_s"], temperature=task["temperature"],
                      top_p=task["top_p"])
    todo = [(i, Prompt(text, tokens, max_tokens), *at) for i, text, tokens, max_tokens, *at in task["prompts"]]
    print(READY, file=sys.stderr, flush=True)
    go = (await parent_line()).split()
    if go[:1] != ["go"]:
        raise BenchError(f"expected 'go SECONDS', got {' '.join(go)!r}")
    cpu_before = time.process_time()
    started, deadline = time.perf_counter(), time.monotonic() + float(go[1])
    records: list[RequestRecord] = []

    async def tell() -> None:
        while True:
            print(f"{FINISHED}{sum(bool(r.success or r.error) for r in records)}",
                  file=sys.stderr, flush=True)
            await asyncio.sleep(0.5)

    teller = asyncio.create_task(tell())
    try:
        if task.get("open_loop"):
            await run_arrivals(cfg, task["model"], todo, task["workers"], task["concurrency"],
                               task["ignore_eos"], deadline, started, records)
        else:
            await run_workers(cfg, task["model"], iter(todo), task["workers"], task["concurrency"],
                              task["ignore_eos"], deadline, started, records)
    finally:
        teller.cancel()
    return {"records": [r.as_dict() for r in records], "cpu_s": time.process_time() - cpu_before}


if __name__ == "__main__":
    sys.exit(child_main(client, "bench client"))
