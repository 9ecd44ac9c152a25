"""The engine's live state from its Prometheus ``/metrics``: KV usage, queue, preemptions.

Used by ``ernie-chat status``, the chat's ``/status`` command and ``bench`` (which
reads the counters before and after a load: what the engine itself measured then).
Parsing uses prometheus_client's own parser, so label order or new series do not break it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx
from prometheus_client.parser import text_string_to_metric_families

from server import tls_contexts
from server.settings import auth_headers, load_settings


@dataclass(frozen=True)
class EngineMetrics:
    kv_cache_usage: float          # 0..1 of the KV pool in use
    running: int
    waiting: int
    preemptions: int
    kv_cache_tokens: Optional[int]  # pool size, from vllm:cache_config_info
    prompt_tokens: int
    generation_tokens: int
    # Prompt tokens looked up in the prefix cache, and found there (counters since start).
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    # Latency histograms since start, as (sum of seconds, count). vLLM times them from the
    # moment a tokenized request reaches its engine (not from the HTTP request), so a
    # client's figures minus these are what the HTTP front end and the network add.
    ttft: tuple[float, int] = (0.0, 0)
    e2e: tuple[float, int] = (0.0, 0)
    queue: tuple[float, int] = (0.0, 0)  # waiting for a place in the running batch
    # Speculative decoding (counters since start): drafting steps, tokens proposed, tokens
    # accepted (vLLM's v1/spec_decode/metrics.py; docs/notes.md).
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0

    @property
    def ttft_avg_s(self) -> Optional[float]:
        """Mean time to first token since start."""
        return self.ttft[0] / self.ttft[1] if self.ttft[1] else None

    def summary(self) -> str:
        pool = f" of {self.kv_cache_tokens:,} tokens" if self.kv_cache_tokens else ""
        ttft = f", mean time to first token {self.ttft_avg_s * 1000:.0f} ms" if self.ttft_avg_s else ""
        return (f"KV cache {self.kv_cache_usage * 100:.1f}% used{pool}; {self.running} running, "
                f"{self.waiting} waiting; {self.preemptions} preemptions{ttft}; "
                f"{self.prompt_tokens:,} prompt + {self.generation_tokens:,} generated tokens so far")


def parse_metrics(text: str) -> EngineMetrics:
    """Sum each series over its labels (one engine, possibly several label sets)."""
    sums: dict[str, float] = {}
    pool: Optional[int] = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
            if sample.name == "vllm:cache_config_info":
                size = sample.labels.get("kv_cache_size_tokens") or ""
                blocks, block = sample.labels.get("num_gpu_blocks"), sample.labels.get("block_size")
                if size.isdigit():
                    pool = int(size)
                elif (blocks or "").isdigit() and (block or "").isdigit():
                    pool = int(blocks) * int(block)
    def histogram(name: str) -> tuple[float, int]:
        return sums.get(f"{name}_sum", 0.0), int(sums.get(f"{name}_count", 0))

    return EngineMetrics(
        kv_cache_usage=sums.get("vllm:kv_cache_usage_perc", sums.get("vllm:gpu_cache_usage_perc", 0.0)),
        running=int(sums.get("vllm:num_requests_running", 0)),
        waiting=int(sums.get("vllm:num_requests_waiting", 0)),
        preemptions=int(sums.get("vllm:num_preemptions_total", sums.get("vllm:num_preemptions", 0))),
        kv_cache_tokens=pool,
        prompt_tokens=int(sums.get("vllm:prompt_tokens_total", sums.get("vllm:prompt_tokens", 0))),
        generation_tokens=int(sums.get("vllm:generation_tokens_total", sums.get("vllm:generation_tokens", 0))),
        prefix_cache_queries=int(sums.get("vllm:prefix_cache_queries_total", 0)),
        prefix_cache_hits=int(sums.get("vllm:prefix_cache_hits_total", 0)),
        ttft=histogram("vllm:time_to_first_token_seconds"),
        e2e=histogram("vllm:e2e_request_latency_seconds"),
        queue=histogram("vllm:request_queue_time_seconds"),
        spec_drafts=int(sums.get("vllm:spec_decode_num_drafts_total", 0)),
        spec_draft_tokens=int(sums.get("vllm:spec_decode_num_draft_tokens_total", 0)),
        spec_accepted_tokens=int(sums.get("vllm:spec_decode_num_accepted_tokens_total", 0)),
    )


def mean_between(before: tuple[float, int], after: tuple[float, int]) -> Optional[float]:
    """The mean of a histogram's observations made between two readings of it."""
    count = after[1] - before[1]
    return (after[0] - before[0]) / count if count > 0 else None


def acceptance_between(before: EngineMetrics, after: EngineMetrics) -> tuple[Optional[float], Optional[float]]:
    """Speculative decoding between two readings: (share of draft tokens accepted, mean
    acceptance length = tokens per drafting step, 1 + accepted / drafts); Nones without drafts."""
    drafted = after.spec_draft_tokens - before.spec_draft_tokens
    drafts = after.spec_drafts - before.spec_drafts
    if drafted <= 0 or drafts <= 0:
        return None, None
    accepted = after.spec_accepted_tokens - before.spec_accepted_tokens
    return accepted / drafted, 1 + accepted / drafts


def read_counters(path: Path) -> dict[str, dict]:
    """The readings ``python -m server.metrics URL LABEL`` appended to ``path``, by label."""
    if not path.exists():
        return {}
    return {c["run"]: c for c in map(json.loads, path.read_text().splitlines())}


def run_means_ms(counters: dict[str, dict], run: str) -> Optional[dict]:
    """vLLM's own mean TTFT, E2E and time queued (ms) over ``run``: its readings
    ``RUN-before`` and ``RUN-after``; None where a reading or a finished request is missing."""
    before, after = counters.get(f"{run}-before"), counters.get(f"{run}-after")
    if before is None or after is None:
        return None
    means = {key: mean_between(tuple(before[key]), tuple(after[key])) for key in ("ttft", "e2e", "queue")}
    return {key: None if mean is None else mean * 1000 for key, mean in means.items()}


def publishes_engine_stats(text: str) -> bool:
    """Whether a /metrics text holds vLLM's own series (any other server, or vLLM with
    --disable-log-stats, answers without them)."""
    return "vllm:" in text


class NoEngineStats(Exception):
    """/metrics answered without vLLM's series: stats off (ERNIE_ENGINE_STATS=false), or
    another server; all-zero figures would read as an idle engine."""


def fetch_metrics(base_url: str, api_key: Optional[str] = None, timeout_s: float = 5.0) -> EngineMetrics:
    response = httpx.get(f"{base_url}/metrics", headers=auth_headers(api_key), timeout=timeout_s,
                         verify=tls_contexts.shared())
    response.raise_for_status()
    if not publishes_engine_stats(response.text):
        raise NoEngineStats(f"The engine at {base_url} publishes no vLLM statistics on /metrics: "
                            "it runs with ERNIE_ENGINE_STATS=false (--disable-log-stats), or it is "
                            "not vLLM. Unset ERNIE_ENGINE_STATS to see its load.")
    return parse_metrics(response.text)


async def fetch_metrics_async(http: httpx.AsyncClient, base_url: str) -> EngineMetrics:
    response = await http.get(f"{base_url}/metrics")
    response.raise_for_status()
    return parse_metrics(response.text)


if __name__ == "__main__":
    # python -m server.metrics URL [LABEL]: the counters now, as one JSON line; the load
    # scripts take one before and one after another tool's run (benchmarks/).
    import dataclasses
    import sys
    import time

    from server.engine_key import engine_key
    stats = fetch_metrics(sys.argv[1], engine_key(load_settings(), sys.argv[1]).value)
    print(json.dumps({"run": sys.argv[2] if len(sys.argv) > 2 else "", "time": time.time(),
                      **dataclasses.asdict(stats)}))
