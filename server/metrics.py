"""The engine's live state from its Prometheus ``/metrics``: KV usage, queue, preemptions.

Used by ``ernie-chat status`` and the chat's ``/status`` command.  Parsing uses
prometheus_client's own parser, so label order or new series do not break it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class EngineMetrics:
    kv_cache_usage: float          # 0..1 of the KV pool in use
    running: int
    waiting: int
    preemptions: int
    kv_cache_tokens: Optional[int]  # pool size, from vllm:cache_config_info
    ttft_avg_s: Optional[float]     # mean time to first token since start
    prompt_tokens: int
    generation_tokens: int
    # Prompt tokens looked up in the prefix cache, and found there (counters since start).
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0

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
    ttft_count = sums.get("vllm:time_to_first_token_seconds_count", 0)
    return EngineMetrics(
        kv_cache_usage=sums.get("vllm:kv_cache_usage_perc", sums.get("vllm:gpu_cache_usage_perc", 0.0)),
        running=int(sums.get("vllm:num_requests_running", 0)),
        waiting=int(sums.get("vllm:num_requests_waiting", 0)),
        preemptions=int(sums.get("vllm:num_preemptions_total", sums.get("vllm:num_preemptions", 0))),
        kv_cache_tokens=pool,
        ttft_avg_s=sums["vllm:time_to_first_token_seconds_sum"] / ttft_count if ttft_count else None,
        prompt_tokens=int(sums.get("vllm:prompt_tokens_total", sums.get("vllm:prompt_tokens", 0))),
        generation_tokens=int(sums.get("vllm:generation_tokens_total", sums.get("vllm:generation_tokens", 0))),
        prefix_cache_queries=int(sums.get("vllm:prefix_cache_queries_total", 0)),
        prefix_cache_hits=int(sums.get("vllm:prefix_cache_hits_total", 0)),
    )


def fetch_metrics(base_url: str, timeout_s: float = 5.0) -> EngineMetrics:
    response = httpx.get(f"{base_url}/metrics", timeout=timeout_s)
    response.raise_for_status()
    return parse_metrics(response.text)


async def fetch_metrics_async(http: httpx.AsyncClient, base_url: str) -> EngineMetrics:
    response = await http.get(f"{base_url}/metrics")
    response.raise_for_status()
    return parse_metrics(response.text)
