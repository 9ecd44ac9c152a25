"""A run of a tune sweep, as its summary, for the choice's tests."""

from __future__ import annotations

from server.loadtest.lib.stats import LevelSummary


def summary(goodput: float, ttft_ms: float = 40.0) -> LevelSummary:
    return LevelSummary.from_dict({
        "requests": 10, "completed": 10, "failed": 0, "duration_s": 1.0, "total_prompt_tokens": 0,
        "total_output_tokens": 0, "goodput": goodput, "output_throughput": goodput * 100,
        "request_throughput": goodput, "total_token_throughput": goodput * 100,
        "slo": {"ttft_ms": 500}, "ttft_ms": {"median": ttft_ms}, "tpot_ms": {"median": 8.0}})
