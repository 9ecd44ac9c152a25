"""tune's statistics (pure): the spread of repeated runs, and when a difference is a finding.

A setting is run several times (fresh prompts each run); each figure of a point is
then a :class:`Spread`: mean, sample standard deviation, min and max.  One rule,
:func:`verdict`, decides whether two points differ:

* **finding**: each point has at least ``MIN_RUNS`` runs and their min-max ranges do
  not overlap: every run of one did better than every run of the other.  If the two
  settings were in fact the same engine, this happens by chance with probability
  ``2 / C(n_a + n_b, n_a)`` (:func:`chance_of_finding`): 1 in 10 for 3 runs each,
  1 in 35 for 4, 1 in 126 for 5, whatever the distribution of the noise.
* **noise**: the ranges overlap (with few runs: or the means are within
  ``TIE_TOLERANCE`` of each other): no run of tune can tell these two apart.
* **unresolved**: too few runs to call it either (a single run has no spread).

The choice treats "noise" as a tie (docs/notes.md, "How tune tells findings from noise").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import fmean, stdev
from typing import Callable, Iterable, Optional

from server.loadtest.lib.stats import LevelSummary

MIN_RUNS = 3
# With fewer runs than MIN_RUNS, means closer than this are one result (a short bench
# does not resolve less); further apart they are "unresolved", not a finding.
TIE_TOLERANCE = 0.02
FINDING, NOISE, UNRESOLVED = "finding", "noise", "unresolved"


@dataclass(frozen=True)
class Spread:
    """Several runs of one figure: how many, their mean, standard deviation and range."""

    n: int
    mean: float
    sd: float
    min: float
    max: float

    def overlaps(self, other: "Spread") -> bool:
        return self.min <= other.max and other.min <= self.max

    def render(self, digits: int) -> str:
        """``mean ±sd [min-max]``; one run shows its value alone."""
        f = lambda v: f"{v:.{digits}f}"
        if self.n == 1:
            return f(self.mean)
        return f"{f(self.mean)} ±{f(self.sd)} [{f(self.min)}-{f(self.max)}]"

    def as_dict(self) -> dict:
        return asdict(self)


def spread(values: Iterable[float]) -> Optional[Spread]:
    """The spread of ``values``; None without any (sd 0 for a single one)."""
    values = list(values)
    if not values:
        return None
    return Spread(len(values), fmean(values), stdev(values) if len(values) > 1 else 0.0,
                  min(values), max(values))


def chance_of_finding(n_a: int, n_b: int) -> float:
    """How often two equal settings still give disjoint ranges: all of one side's runs
    above all of the other's, either way round, among C(n_a + n_b, n_a) equally likely orders."""
    return 2 / math.comb(n_a + n_b, n_a)


def verdict(a: Spread, b: Spread) -> str:
    """FINDING, NOISE or UNRESOLVED for the difference between two points' figures."""
    if min(a.n, b.n) >= MIN_RUNS:
        return NOISE if a.overlaps(b) else FINDING
    larger = max(abs(a.mean), abs(b.mean))
    if a.overlaps(b) or not larger or abs(a.mean - b.mean) / larger < TIE_TOLERANCE:
        return NOISE
    return UNRESOLVED


@dataclass(frozen=True)
class Figure:
    """One figure tune reports for every point, read from each run's summary."""

    key: str
    title: str
    unit: str
    digits: int
    read: Callable[[LevelSummary], Optional[float]]


FIGURES = (
    Figure("goodput", "goodput", "req/s", 2, lambda s: s.goodput),
    Figure("output_throughput", "output", "tok/s", 0, lambda s: s.output_throughput),
    Figure("ttft_p50_ms", "TTFT p50", "ms", 1, lambda s: s.ttft_ms.median),
    Figure("tpot_p50_ms", "TPOT p50", "ms", 2, lambda s: s.tpot_ms.median),
    # Only where the engine speculates (ERNIE_SPECULATIVE_NGRAM): vLLM's own counters.
    Figure("spec_acceptance", "drafts accepted", "%", 1,
           lambda s: None if s.spec_acceptance_rate is None else s.spec_acceptance_rate * 100),
)
GOODPUT = FIGURES[0]


def figure_spreads(runs: list[LevelSummary]) -> dict[str, Spread]:
    """Every figure's spread over the runs that have it."""
    spreads = {}
    for figure in FIGURES:
        if s := spread(v for v in map(figure.read, runs) if v is not None):
            spreads[figure.key] = s
    return spreads
