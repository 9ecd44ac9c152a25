"""tune's points and its choice among them (pure): what was swept, what won, and why.

A point is one engine setting; an outcome is what happened when tune ran it.
The choice is the best goodput among the measured points that serve the
longest request the user needs; near-ties go to the point that needs less memory.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Optional

from server.errors import LoadTestError
from server.loadtest.report import one_decimal
from server.loadtest.stats import LevelSummary
from server.loadtest.target import mostly_cached
from server.settings import env_name

# Goodputs closer than this are one result: a short bench does not resolve less.
TIE_TOLERANCE = 0.02


class TuneError(LoadTestError):
    """A sweep that cannot be run or a choice that cannot be made; the message says why."""


@dataclass(frozen=True)
class Point:
    """One engine setting of the sweep; None leaves the setting as it is."""

    max_model_len: int
    gpu_memory_utilization: Optional[float] = None
    kv_cache_gib: Optional[float] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None

    def overrides(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def env_values(self) -> dict[str, str]:
        return {env_name(k): str(v) for k, v in self.overrides().items()}

    @property
    def memory(self) -> float:
        """What the point costs in memory, to prefer the smaller of two equal points."""
        return self.gpu_memory_utilization or self.kv_cache_gib or 0.0

    def label(self) -> str:
        parts = [f"len {self.max_model_len}"]
        if self.gpu_memory_utilization is not None:
            parts.append(f"util {self.gpu_memory_utilization:g}")
        if self.kv_cache_gib is not None:
            parts.append(f"kv {self.kv_cache_gib:g} GiB")
        if self.max_num_seqs is not None:
            parts.append(f"seqs {self.max_num_seqs}")
        if self.max_num_batched_tokens is not None:
            parts.append(f"batch {self.max_num_batched_tokens}")
        return ", ".join(parts)


@dataclass
class Outcome:
    """What happened at one point: measured, failed (did not start or serve) or not run."""

    point: Point
    status: str = "not run"
    reason: str = ""
    port: Optional[int] = None
    pid: Optional[int] = None
    startup_s: Optional[float] = None
    served_max_model_len: Optional[int] = None
    kv_tokens: Optional[int] = None
    kv_memory_gib: Optional[float] = None
    kv_concurrency: Optional[float] = None
    summary: Optional[LevelSummary] = None

    @property
    def goodput(self) -> Optional[float]:
        return self.summary.goodput if self.summary else None

    def as_dict(self) -> dict:
        out = {**asdict(self), "label": self.point.label(), "goodput": self.goodput}
        out["summary"] = self.summary.as_dict() if self.summary else None
        return out


def sweep(max_model_lens, utilizations=(None,), kv_cache_gibs=(None,), max_num_seqs=(None,),
          max_num_batched_tokens=(None,)) -> list[Point]:
    """The cartesian product of the values given, in the order given."""
    return [Point(*values) for values in itertools.product(
        max_model_lens, utilizations, kv_cache_gibs, max_num_seqs, max_num_batched_tokens)]


# --- the choice (pure) -------------------------------------------------------------

def serving(outcomes: list[Outcome], need: int) -> list[Outcome]:
    return [o for o in outcomes if o.status == "measured" and (o.served_max_model_len or 0) >= need]


def choose(outcomes: list[Outcome], need: int) -> Outcome:
    """The best goodput among measured points that serve ``need`` tokens per request.

    Goodputs within TIE_TOLERANCE of the best are a tie (a short bench cannot tell
    them apart); of those the one with the least memory wins, as it leaves the most
    for everything else, then the higher goodput, then the earlier point.
    """
    eligible = serving(outcomes, need)
    if not eligible:
        measured = [o for o in outcomes if o.status == "measured"]
        longest = max((o.served_max_model_len or 0 for o in measured), default=0)
        why = (f"the longest max-model-len measured is {longest}" if measured
               else "no point was measured (see the reasons in the table)")
        raise TuneError(f"No point serves the {need}-token requests you need: {why}. Add a "
                        f"--max-model-len of at least {need} to the sweep (with enough KV memory "
                        "for it), or lower --need-max-model-len.")
    best = max(o.goodput for o in eligible)
    tied = [(i, o) for i, o in enumerate(eligible) if o.goodput >= best * (1 - TIE_TOLERANCE)]
    return max(tied, key=lambda pair: (-pair[1].point.memory, pair[1].goodput, -pair[0]))[1]


def explain(chosen: Outcome, outcomes: list[Outcome], need: int, need_source: str) -> str:
    """One paragraph: what was chosen, why, and what the other points showed."""
    s = chosen.summary
    eligible = serving(outcomes, need)
    others = sorted((o for o in eligible if o is not chosen), key=lambda o: -o.goodput)
    text = (f"Chosen: {chosen.point.label()}. It served the {need}-token requests you need "
            f"({need_source}) with the best goodput, {s.goodput:.2f} requests/s under "
            f"{s.slo.describe()} ({s.output_throughput:.0f} output tokens/s, TTFT p50 "
            f"{one_decimal(s.ttft_ms.median)} ms, TPOT p50 "
            f"{one_decimal(s.tpot_ms.median)} ms)")
    if others:
        runner = others[0]
        gap = (s.goodput - runner.goodput) / runner.goodput * 100 if runner.goodput else float("inf")
        if gap < TIE_TOLERANCE * 100:
            text += (f"; {runner.point.label()} did within {TIE_TOLERANCE:.0%} as well, a tie a "
                     "short bench cannot resolve, decided for the setting with less memory")
        else:
            text += f", {gap:.0f}% above the next best, {runner.point.label()}"
    text += "."
    short = [o for o in outcomes if o.status == "measured" and all(o is not e for e in eligible)]
    failed = [o for o in outcomes if o.status == "failed"]
    if short:
        text += (f" {len(short)} point(s) were measured but cannot serve {need} tokens per request "
                 "and were not eligible.")
    if failed:
        text += f" {len(failed)} point(s) failed: " + "; ".join(
            f"{o.point.label()}: {o.reason}" for o in failed) + "."
    if chosen.kv_tokens:
        text += (f" vLLM reported a KV cache of {chosen.kv_tokens:,} tokens for it, room for "
                 f"{chosen.kv_concurrency:.1f} requests of max-model-len at once.")
    return text


def render_table(outcomes: list[Outcome]) -> str:
    head = (f"{'#':>2}  {'setting':<44}{'start s':>8}{'KV tokens':>11}{'conc@len':>9}{'req/s':>8}"
            f"{'out tok/s':>10}{'goodput':>8}{'TTFT p50':>9}{'TPOT p50':>9}  status")
    lines = [head, "-" * len(head)]
    num = lambda v, f: "-" if v is None else format(v, f)
    for i, o in enumerate(outcomes, 1):
        s = o.summary
        lines.append(
            f"{i:>2}  {o.point.label():<44}{num(o.startup_s, '.0f'):>8}{num(o.kv_tokens, ','):>11}"
            f"{num(o.kv_concurrency, '.1f'):>9}{num(s and s.request_throughput, '.2f'):>8}"
            f"{num(s and s.output_throughput, '.0f'):>10}{num(o.goodput, '.2f'):>8}"
            f"{one_decimal(s and s.ttft_ms.median):>9}"
            f"{one_decimal(s and s.tpot_ms.median):>9}  "
            f"{o.status}{': ' + o.reason[:120] if o.reason else ''}")
    cached = [o.point.label() for o in outcomes if o.summary and mostly_cached(o.summary)]
    if cached:
        lines.append(f"WARNING: the prefix cache served many prompt tokens at {', '.join(cached)}: "
                     "TTFT and goodput there are those of cached prompts.")
    return "\n".join(lines)


def plot_rows(outcomes: list[Outcome], chosen: Optional[Outcome], need: int) -> list[dict]:
    def role(o: Outcome) -> str:
        if o is chosen:
            return "chosen"
        if o.status != "measured":
            return "failed" if o.status == "failed" else "not run"
        return "eligible" if (o.served_max_model_len or 0) >= need else "too short"
    return [{"label": o.point.label(), "goodput": o.goodput, "role": role(o)} for o in outcomes]
