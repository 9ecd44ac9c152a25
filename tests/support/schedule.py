"""How a full run shares its two test processes (pytest-xdist, ``--dist loadscope``).

A group is what one process must run alone because it shares a configuration that takes
minutes to start: every module on the models tier's two vLLMs is in "model-pair", and any
other module is a group of its own (its module-scoped stack stays in one process). The
modules on the session's vLLM are not held together: they took 15 minutes of a run, more
than the rest of the run left the other process, so each process starts a session vLLM of
its own once it needs one (about 40 s on a busy core). Groups go out longest first, from the seconds each
module took in the last full run on 2 cores (tests/data/durations.json; a module missing there
counts 0), so that neither process is left alone with a long one at the end. The unit and
network tests, which need no engine, come right after the first group: the other process
runs them while the engine's environment builds, which every vLLM waits for.

The workers collect the tests and find the groups; the controller, which collects nothing,
reads them from a file the workers write, and hands out one group at a time.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional, Sequence

from xdist.scheduler import LoadScopeScheduling

# Package fixtures whose start takes minutes: whoever uses one runs beside the others.
SHARED = {"model_pair": "model-pair"}


def module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def groups(items: Sequence[tuple[str, Iterable[str]]]) -> dict[str, str]:
    """module -> group, for (module, one test's fixtures) pairs: the first shared fixture any
    test of the module uses, else the module itself."""
    used: dict[str, set[str]] = defaultdict(set)
    for module, fixtures in items:
        used[module] |= set(fixtures)
    return {module: next((group for fixture, group in SHARED.items() if fixture in names), module)
            for module, names in used.items()}


def order(group_of: dict[str, str], seconds: dict[str, float], fillers: set[str],
          late: frozenset[str] = frozenset(), late_after_s: float = 0.0) -> list[str]:
    """The groups longest first (a group: the seconds of its modules), with ``fillers`` right
    after the longest one, and the ``late`` ones once the groups before them add up to
    ``late_after_s``: tests that wait for something the run builds in the background."""
    weight: dict[str, float] = defaultdict(float)
    for module, group in group_of.items():
        weight[group] += seconds.get(module, 0.0)
    ranked = sorted(dict.fromkeys(group_of.values()), key=lambda group: -weight[group])
    normal = [g for g in ranked if g not in late]
    head, rest = normal[:1], normal[1:]
    early = head + [g for g in rest if g in fillers] + [g for g in rest if g not in fillers]
    at, before = len(early), 0.0
    for i, group in enumerate(early):
        if before >= late_after_s:
            at = i
            break
        before += weight[group]
    return early[:at] + [g for g in ranked if g in late] + early[at:]


def load_seconds(path: Path) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def write_groups(path: Path, group_of: dict[str, str]) -> None:
    """Written whole or not at all: both workers write the same groups."""
    part = path.with_name(f"{path.name}.{os.getpid()}")
    part.write_text(json.dumps(group_of))
    part.replace(path)


class Durations:
    """Adds up each module's seconds (set-up, call and tear-down) as the run's reports come
    in, and writes them at the end."""

    def __init__(self, path: Path):
        self.path, self.seconds = path, defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        if self.seconds:
            ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])
            self.path.write_text(json.dumps({module: round(s, 1) for module, s in ranked}, indent=1) + "\n")


def cpu_times(stat: str) -> tuple[int, int]:
    """(idle, total) clock ticks of all cores, from the first line of /proc/stat's text."""
    ticks = [int(n) for n in stat.split("\n", 1)[0].split()[1:]]
    return ticks[3] + ticks[4], sum(ticks[:8])  # idle + iowait; guest time is in user already


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the cores' time between two readings that was not idle."""
    total = after[1] - before[1]
    return 1 - (after[0] - before[0]) / total if total else 0.0


def read_cpu_times() -> Optional[tuple[int, int]]:
    try:
        return cpu_times(Path("/proc/stat").read_text())
    except OSError:  # not Linux
        return None


class Timeline:
    """When each process ran each module, from the reports' clocks, and how busy the machine's
    cores were; printed at the end of a run (where CI's log shows it) with the modules that
    took ``shown_s`` or more. Idle cores while a run goes on are time a test could have used."""

    def __init__(self, shown_s: float = 10.0):
        self.shown_s, self.cpu_at_start = shown_s, read_cpu_times()
        self.spans: dict[tuple[str, str], list[float]] = {}  # (process, module) -> [start, stop]

    def pytest_runtest_logreport(self, report) -> None:
        process = getattr(getattr(report, "node", None), "gateway", None)
        key = (getattr(process, "id", "main"), module_of(report.nodeid))
        span = self.spans.setdefault(key, [report.start, report.stop])
        span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.spans:
            return
        began = min(start for start, _ in self.spans.values())
        terminalreporter.section(f"timeline (s from the first test; modules of {self.shown_s:.0f} s or more)")
        for process in sorted({process for process, _ in self.spans}):
            rows = sorted((start - began, stop - began, module)
                          for (p, module), (start, stop) in self.spans.items() if p == process)
            shown = [f"{start:.0f}-{stop:.0f} {module.removeprefix('tests/')}"
                     for start, stop, module in rows if stop - start >= self.shown_s]
            if shown:
                terminalreporter.write_line(f"{process}: " + ", ".join(shown))
        now = read_cpu_times()
        if self.cpu_at_start and now:
            terminalreporter.write_line(f"cores busy: {busy_share(self.cpu_at_start, now):.0%} of the "
                                        f"run (all processes of this machine)")


class ByConfiguration(LoadScopeScheduling):
    """pytest-xdist's scheduling by scope, a scope being a group, in the workers' order."""

    def __init__(self, config, log, groups_file: Path):
        config.option.loadscopereorder = False  # the workers sorted the tests: longest first
        super().__init__(config, log)
        self.groups_file = groups_file
        self.group_of: Optional[dict[str, str]] = None

    def _split_scope(self, nodeid: str) -> str:
        if self.group_of is None:  # the workers have collected by now: the file is there
            self.group_of = json.loads(self.groups_file.read_text())
        return self.group_of.get(module_of(nodeid), module_of(nodeid))
