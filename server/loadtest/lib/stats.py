"""The statistics of a load test, computed the way ``vllm bench serve`` computes them.

Pure functions over per-request records, so every figure can be checked by hand
(tests/unit/test_bench_stats.py) and recomputed from a saved result.  Definitions
follow vLLM's ``benchmarks/serve.py`` so our numbers and theirs can be compared:

* TTFT: from sending the request to the first streamed chunk that carries a choice;
* ITL: the gaps between consecutive such chunks;
* E2E: from sending the request to the LAST such chunk (the usage chunk and
  ``[DONE]`` that follow are not counted, as in vLLM);
* TPOT: ``(e2e - ttft) / (output_tokens - 1)``, undefined for one-token replies;
* throughputs divide by the wall time of the whole run, not a sum of latencies;
* goodput: requests per second that met every SLO given; a reply of one token
  counts as TPOT 0, as in vLLM's ``--goodput``.

Only the standard library (and the stdlib-only kv_planner): this runs on GPU
machines that have vLLM but not our app environment.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from statistics import fmean
from typing import Iterable, Optional

from server.plan.kv_planner import percentile

MS = 1000.0


@dataclass
class RequestRecord:
    """What one request did; times in seconds, ``start_s`` (sent) and ``arrival_s`` (released by
    an open-loop schedule, before it waited for a slot; None in a closed loop) from the start
    of its run."""

    index: int
    concurrency: int
    prompt_tokens: int
    max_tokens: int
    start_s: float = 0.0
    success: bool = False
    error: str = ""
    ttft_s: Optional[float] = None
    e2e_s: Optional[float] = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    output_tokens_from: str = "usage"  # or "chunks" when the server sent no usage
    finish_reason: Optional[str] = None
    arrival_s: Optional[float] = None

    @property
    def tpot_s(self) -> Optional[float]:
        return tpot(self.e2e_s, self.ttft_s, self.output_tokens)

    def as_dict(self) -> dict:
        return {**asdict(self), "tpot_s": self.tpot_s}


def tpot(e2e_s: Optional[float], ttft_s: Optional[float], output_tokens: int) -> Optional[float]:
    """Time per output token after the first; None when there is no second token."""
    if e2e_s is None or ttft_s is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


@dataclass(frozen=True)
class Slo:
    """Service-level objectives in milliseconds; None means no limit on that figure."""

    ttft_ms: Optional[float] = None
    tpot_ms: Optional[float] = None

    @property
    def any(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    def describe(self) -> str:
        parts = [f"{name} <= {limit:g} ms" for name, limit in
                 (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms)) if limit is not None]
        return " and ".join(parts) if parts else "no SLO (goodput = request throughput)"


def meets_slo(record: RequestRecord, slo: Slo) -> bool:
    if not record.success:
        return False
    if slo.ttft_ms is not None and (record.ttft_s is None or record.ttft_s * MS > slo.ttft_ms):
        return False
    # vLLM's rule: a one-token reply has TPOT 0, so it always meets a TPOT limit.
    if slo.tpot_ms is not None and (record.tpot_s or 0.0) * MS > slo.tpot_ms:
        return False
    return True


@dataclass(frozen=True)
class Distribution:
    """mean, median and p99 of one figure, in milliseconds; None where there were no values."""

    mean: Optional[float] = None
    median: Optional[float] = None
    p99: Optional[float] = None


def distribution_ms(values_s: Iterable[float]) -> Distribution:
    """The distribution of ``values_s`` (seconds) in milliseconds."""
    values = [v * MS for v in values_s]
    if not values:
        return Distribution()
    return Distribution(fmean(values), percentile(values, 50), percentile(values, 99))


@dataclass
class LevelSummary:
    """The aggregate figures of one run at one concurrency level, as bench.json keeps them.

    The first block is computed from the client's records (:func:`summarize_level`);
    the engine's own view (from vLLM's /metrics) and the client's own load are added
    by the run, which alone can read them.
    """

    requests: int = 0
    completed: int = 0
    failed: int = 0
    duration_s: float = 0.0
    total_prompt_tokens: int = 0
    total_output_tokens: int = 0
    request_throughput: float = 0.0
    output_throughput: float = 0.0
    total_token_throughput: float = 0.0
    goodput: float = 0.0
    slo: Slo = Slo()
    ttft_ms: Distribution = Distribution()
    tpot_ms: Distribution = Distribution()
    itl_ms: Distribution = Distribution()
    e2e_ms: Distribution = Distribution()
    prefix_cache_hit_rate: Optional[float] = None
    server_ttft_ms_mean: Optional[float] = None
    server_e2e_ms_mean: Optional[float] = None
    server_queue_ms_mean: Optional[float] = None
    spec_acceptance_rate: Optional[float] = None    # draft tokens accepted / proposed
    spec_acceptance_length: Optional[float] = None  # tokens per drafting step
    client_cpu_fraction: float = 0.0
    not_sent: int = 0
    # An open-loop level (bench --request-rate); all None in a closed loop.
    request_rate: Optional[float] = None           # asked, requests/s
    burstiness: Optional[float] = None
    achieved_request_rate: Optional[float] = None  # arrivals / the last arrival's second
    mean_interarrival_ms: Optional[float] = None
    client_wait_ms_mean: Optional[float] = None    # arrival to sending: waiting for a slot

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None

    def as_dict(self) -> dict:
        out = asdict(self)
        out["slo"]["text"] = self.slo.describe()
        if self.burstiness == float("inf"):
            out["burstiness"] = "inf"  # JSON has no infinity
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "LevelSummary":
        """A summary read back from a saved bench.json; what an older file lacks stays empty."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        slo = data.get("slo") or {}
        values["slo"] = Slo(slo.get("ttft_ms"), slo.get("tpot_ms"))
        if values.get("burstiness") == "inf":
            values["burstiness"] = float("inf")
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            values[name] = Distribution(**(data.get(name) or {}))
        return cls(**values)


def summarize_level(records: list[RequestRecord], duration_s: float, slo: Slo = Slo()) -> LevelSummary:
    """The aggregate figures of one run (one concurrency level)."""
    done = [r for r in records if r.success]
    output = sum(r.output_tokens for r in done)
    prompt = sum(r.prompt_tokens for r in done)
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: 0.0)
    return LevelSummary(
        requests=len(records),
        completed=len(done),
        failed=len(records) - len(done),
        duration_s=duration_s,
        total_prompt_tokens=prompt,
        total_output_tokens=output,
        request_throughput=per_s(len(done)),
        output_throughput=per_s(output),
        total_token_throughput=per_s(prompt + output),
        goodput=per_s(sum(meets_slo(r, slo) for r in done)),
        slo=slo,
        ttft_ms=distribution_ms(r.ttft_s for r in done if r.ttft_s is not None),
        tpot_ms=distribution_ms(r.tpot_s for r in done if r.tpot_s is not None),
        itl_ms=distribution_ms(gap for r in done for gap in r.itl_s),
        e2e_ms=distribution_ms(r.e2e_s for r in done if r.e2e_s is not None),
    )


def percent_difference(ours: Optional[float], theirs: Optional[float]) -> Optional[float]:
    """(ours - theirs) / theirs in percent; None when either is missing or theirs is 0."""
    return (ours - theirs) / theirs * 100 if ours is not None and theirs else None
