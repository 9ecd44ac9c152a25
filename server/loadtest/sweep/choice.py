"""tune's points and its choice among them (pure): what was swept, what won, and why.

A point is one engine setting (settings overrides); an outcome is what happened when
tune ran it: its start and its repeated runs.  The choice is the best mean goodput
among the measured points that serve the longest request the user needs (with
``tune --users``: and kept every run within the users objective); a point
whose goodput differs from the best only by noise (tune_stats.verdict) is a tie, and a
tie goes to the cheaper point: less memory, then fewer processes, then the earlier one.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from server.errors import LoadTestError
from server.loadtest.lib.stats import LevelSummary
from server.loadtest.lib.target import mostly_cached
from server.loadtest.sweep.stats import (
    FIGURES,
    FINDING,
    GOODPUT,
    NOISE,
    Spread,
    chance_of_finding,
    figure_spreads,
    spread,
    verdict,
)
from server.settings import env_name

# Short names in labels for the settings swept most; any other shows as name=value.
SHORT = {"max_model_len": "len {}", "gpu_memory_utilization": "util {}",
         "kv_cache_gib": "kv {} GiB", "max_num_seqs": "seqs {}", "max_num_batched_tokens": "batch {}"}
# Settings that start more processes (the stack's, once it has them): fewer is cheaper.
PROCESS_SETTINGS = ("api_servers", "engine_copies")


class TuneError(LoadTestError):
    """A sweep that cannot be run or a choice that cannot be made; the message says why."""


@dataclass(frozen=True)
class Point:
    """One engine setting: settings to override (None: unset, vLLM's own choice), and a
    name for a point given as a whole (``--baseline``, ``--point``)."""

    values: tuple[tuple[str, Any], ...]
    name: str = ""

    @classmethod
    def of(cls, name: str = "", **values) -> "Point":
        return cls(tuple(values.items()), name)

    def overrides(self) -> dict:
        return dict(self.values)

    @property
    def max_model_len(self) -> int:
        return self.overrides()["max_model_len"]

    def env_values(self) -> dict[str, Optional[str]]:
        """The ERNIE_* lines that give this setting; None: the line must go (vLLM's own)."""
        text = lambda v: None if v is None else str(v).lower() if isinstance(v, bool) else str(v)
        return {env_name(k): text(v) for k, v in self.values}

    @property
    def cost(self) -> tuple[float, float]:
        """What the point takes from the machine: its memory, then its processes."""
        values = self.overrides()
        memory = values.get("gpu_memory_utilization") or values.get("kv_cache_gib") or 0.0
        processes = 1.0
        for name in PROCESS_SETTINGS:
            processes *= values.get(name) or 1
        return memory, processes

    def label(self) -> str:
        parts = [SHORT.get(k, k + "={}").format(v) for k, v in self.values if v is not None]
        return f"{self.name}: {', '.join(parts)}" if self.name else ", ".join(parts)


@dataclass
class Outcome:
    """What happened at one point: measured, failed (did not start or serve), cut by the
    sweep's time limit (a resumed sweep runs it again) or not run."""

    point: Point
    status: str = "not run"
    reason: str = ""
    port: Optional[int] = None
    pid: Optional[int] = None
    startup_s: Optional[float] = None
    startup_phases: list[dict] = field(default_factory=list)  # vllm_log.Phase as dicts
    served_max_model_len: Optional[int] = None
    kv_tokens: Optional[int] = None
    kv_memory_gib: Optional[float] = None
    kv_concurrency: Optional[float] = None
    runs: list[LevelSummary] = field(default_factory=list)  # one per repeat
    # tune --users: why each run missed the users objective, '' where it was within it
    missed: list[str] = field(default_factory=list)

    @property
    def misses(self) -> list[str]:
        """Why each run that missed the users objective missed it."""
        return [why for why in self.missed if why]

    @property
    def within_objective(self) -> bool:
        """Every run within the users objective (a bench sweep has none to miss)."""
        return not self.misses

    @property
    def spreads(self) -> dict[str, Spread]:
        return figure_spreads(self.runs)

    @property
    def goodput(self) -> Optional[Spread]:
        return self.spreads.get(GOODPUT.key)

    def as_dict(self) -> dict:
        out = {**asdict(self), "label": self.point.label(), "runs": [r.as_dict() for r in self.runs]}
        out["point"] = {"name": self.point.name, "values": self.point.overrides()}
        out["spread"] = {k: s.as_dict() for k, s in self.spreads.items()}
        out["goodput"] = self.goodput.mean if self.goodput else None
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Outcome":
        """An outcome as tune.json keeps it (a resumed sweep starts from these)."""
        point = Point(tuple(data["point"]["values"].items()), data["point"]["name"])
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "point": point,
                      "runs": [LevelSummary.from_dict(r) for r in data.get("runs", [])]})


def sweep(dimensions: dict[str, tuple], fixed: Optional[dict] = None) -> list[Point]:
    """The cartesian product of the dimensions' values, in the order given, each point with
    the ``fixed`` values where it does not sweep them."""
    names = list(dimensions)
    return [Point.of(**{**(fixed or {}), **dict(zip(names, values))})
            for values in itertools.product(*(dimensions[n] for n in names))]


# --- the choice (pure) -------------------------------------------------------------

def serving(outcomes: list[Outcome], need: int) -> list[Outcome]:
    return [o for o in outcomes if o.status == "measured" and o.runs
            and (o.served_max_model_len or 0) >= need]


def eligible(outcomes: list[Outcome], need: int) -> list[Outcome]:
    """The points the choice may take: they serve ``need`` and kept the users objective."""
    return [o for o in serving(outcomes, need) if o.within_objective]


def choose(outcomes: list[Outcome], need: int) -> Outcome:
    """The best goodput among measured points that serve ``need`` tokens per request (and
    kept the users objective in every run, where the sweep has one).

    The points whose goodput is noise against the best's (tune_stats.verdict) are a tie;
    of those the cheapest wins, as it leaves the most for everything else, then the
    higher mean, then the earlier point.
    """
    candidates, long_enough = eligible(outcomes, need), serving(outcomes, need)
    if not candidates and long_enough:
        closest = min(long_enough, key=lambda o: len(o.misses))
        raise TuneError(f"No point kept every run within the users objective; the closest, "
                        f"{closest.point.label()}, missed it in {len(closest.misses)} of "
                        f"{len(closest.missed)} runs ({closest.misses[0]}). Fewer --users, or more of what the "
                        "sweep varies (engine_copies, api_servers, stream_interval).")
    if not candidates:
        measured = [o for o in outcomes if o.status == "measured"]
        longest = max((o.served_max_model_len or 0 for o in measured), default=0)
        why = (f"the longest max-model-len measured is {longest}" if measured
               else "no point was measured (see the reasons in the table)")
        raise TuneError(f"No point serves the {need}-token requests you need: {why}. Add a "
                        f"--max-model-len of at least {need} to the sweep (with enough KV memory "
                        "for it), or lower --need-max-model-len.")
    best = max(candidates, key=lambda o: o.goodput.mean)
    tied = [(i, o) for i, o in enumerate(candidates)
            if o is best or verdict(best.goodput, o.goodput) == NOISE]
    cost = lambda o: tuple(-c for c in o.point.cost)
    return max(tied, key=lambda pair: (cost(pair[1]), pair[1].goodput.mean, -pair[0]))[1]


def compared(chosen: Outcome, other: Outcome) -> str:
    """How ``other``'s goodput compares with the chosen one's, in words for a person."""
    a, b = chosen.goodput, other.goodput
    said = verdict(a, b)
    if said == FINDING:
        return (f"a finding (every run of one beat every run of the other; 1 in "
                f"{1 / chance_of_finding(a.n, b.n):.0f} by chance alone)")
    if said == NOISE:
        return ("noise (their ranges of runs overlap)" if min(a.n, b.n) > 1
                else "noise (within the tolerance of a single run)")
    return f"unresolved ({min(a.n, b.n)} run(s): --repeats 3 or more tells findings from noise)"


def explain(chosen: Outcome, outcomes: list[Outcome], need: int, need_source: str) -> str:
    """One paragraph: what was chosen, why, and what the other points showed."""
    s, spreads = chosen.runs[0], chosen.spreads
    fig = {f.key: f for f in FIGURES}
    shown = lambda key: f"{spreads[key].render(fig[key].digits)} {fig[key].unit}" if key in spreads else "-"
    candidates, long_enough = eligible(outcomes, need), serving(outcomes, need)
    text = (f"Chosen: {chosen.point.label()}. It served the {need}-token requests you need "
            f"({need_source}) with goodput {shown('goodput')} under {s.slo.describe()}, over "
            f"{chosen.goodput.n} run(s) (output {shown('output_throughput')}, TTFT p50 "
            f"{shown('ttft_p50_ms')}, TPOT p50 {shown('tpot_p50_ms')})")
    better = [o for o in candidates if o.goodput.mean > chosen.goodput.mean]
    others = sorted((o for o in candidates if o is not chosen), key=lambda o: -o.goodput.mean)
    if better:
        top = max(better, key=lambda o: o.goodput.mean)
        text += (f". {top.point.label()} had a higher mean goodput ({top.goodput.mean:.2f}), but "
                 f"the difference is {compared(chosen, top)}: a tie, decided for the cheaper setting")
    elif others:
        runner = others[0]
        gap = ((chosen.goodput.mean - runner.goodput.mean) / runner.goodput.mean * 100
               if runner.goodput.mean else float("inf"))
        text += (f"; {gap:.0f}% above the next best, {runner.point.label()}: "
                 f"{compared(chosen, runner)}")
    text += "."
    short = [o for o in outcomes if o.status == "measured" and all(o is not e for e in long_enough)]
    missed = [o for o in long_enough if not o.within_objective]
    failed = [o for o in outcomes if o.status == "failed"]
    if short:
        text += (f" {len(short)} point(s) were measured but cannot serve {need} tokens per request "
                 "and were not eligible.")
    if missed:
        text += f" {len(missed)} point(s) missed the users objective in a run: " + "; ".join(
            f"{o.point.label()}: {o.misses[0]}" for o in missed) + "."
    if failed:
        text += f" {len(failed)} point(s) failed: " + "; ".join(
            f"{o.point.label()}: {o.reason}" for o in failed) + "."
    if chosen.kv_tokens:
        text += (f" vLLM reported a KV cache of {chosen.kv_tokens:,} tokens for it, room for "
                 f"{chosen.kv_concurrency:.1f} requests of max-model-len at once.")
    return text


def render_table(outcomes: list[Outcome], chosen: Optional[Outcome] = None) -> str:
    """One line per point: each figure as mean ±sd [min-max] over its runs, and how its
    goodput compares with the chosen point's (finding, noise, unresolved)."""
    figures = [f for f in FIGURES if any(f.key in o.spreads for o in outcomes)]
    num = lambda v, f: "-" if v is None else format(v, f)
    cells = {id(o): [o.spreads[f.key].render(f.digits) if f.key in o.spreads else "-"
                     for f in figures] for o in outcomes}
    widths = [max([len(f"{f.title} {f.unit}")] + [len(cells[id(o)][i]) for o in outcomes])
              for i, f in enumerate(figures)]
    width = max([len("setting")] + [len(o.point.label()) for o in outcomes]) + 2
    head = (f"{'#':>2}  {'setting':<{width}}{'start s':>8}{'KV tokens':>11}{'runs':>5}  "
            + "  ".join(f"{f.title + ' ' + f.unit:<{w}}" for f, w in zip(figures, widths))
            + "  vs chosen / status")
    lines = [head, "-" * len(head)]
    for i, o in enumerate(outcomes, 1):
        versus = ("chosen" if o is chosen else verdict(chosen.goodput, o.goodput)
                  if chosen is not None and o.goodput and chosen.goodput else "")
        state = "" if o.status == "measured" else f"{o.status}{': ' + o.reason[:120] if o.reason else ''}"
        if o.status == "measured" and not o.within_objective:
            versus = f"missed the objective in {len(o.misses)}/{len(o.missed)} runs: {o.misses[0]}"
        lines.append(
            f"{i:>2}  {o.point.label():<{width}}{num(o.startup_s, '.0f'):>8}{num(o.kv_tokens, ','):>11}"
            f"{len(o.runs):>5}  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells[id(o)], widths))
            + f"  {versus or state}")
    cached = [o.point.label() for o in outcomes if any(mostly_cached(r) for r in o.runs)]
    if cached:
        lines.append(f"WARNING: the prefix cache served many prompt tokens at {', '.join(cached)}: "
                     "TTFT and goodput there are those of cached prompts.")
    return "\n".join(lines)


def plot_rows(outcomes: list[Outcome], chosen: Optional[Outcome], need: int) -> list[dict]:
    """What the plot needs of each point: its role, and each figure's runs."""
    def role(o: Outcome) -> str:
        if o is chosen:
            return "chosen"
        if o.status != "measured":
            return "failed" if o.status == "failed" else "not run"
        if (o.served_max_model_len or 0) < need:
            return "too short"
        return "eligible" if o.within_objective else "missed the objective"
    shared = shared_values(outcomes)
    def short(point: Point) -> str:
        """A named point's name (the table has its settings); else the label without what
        every point has (the plot's title says that)."""
        if point.name:
            return point.name
        return Point(tuple(v for v in point.values if v not in shared), point.name).label() or "as set"
    def figures(o: Outcome) -> dict:
        runs = {f.key: [v for v in map(f.read, o.runs) if v is not None] for f in FIGURES}
        return {"runs": runs, "spread": {k: s.as_dict() for k, values in runs.items() if (s := spread(values))}}
    return [{"label": short(o.point), "role": role(o), **figures(o)} for o in outcomes]


def plot_panels(rows: list[dict]) -> list[tuple[str, str]]:
    """The plot's panels, (figure key, heading): the figures some point has, else goodput's."""
    figures = [f for f in FIGURES if any(row["runs"][f.key] for row in rows)] or [GOODPUT]
    return [(f.key, f"{f.title} ({f.unit})") for f in figures]


def shared_values(outcomes: list[Outcome]) -> set:
    """The (setting, value) pairs every point has."""
    return set.intersection(*(set(o.point.values) for o in outcomes)) if outcomes else set()


def shared_label(outcomes: list[Outcome]) -> str:
    """What every point of the sweep has, for the plot's title."""
    shared = shared_values(outcomes)
    return Point(tuple(v for v in outcomes[0].point.values if v in shared)).label() if shared else ""
