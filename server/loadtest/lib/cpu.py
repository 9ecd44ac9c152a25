"""Processes' CPU from /proc: one process's (the app's, for ``bench --app-cost``), and the
machine's by kind of process while a load runs (``ernie-chat cpu-during``; ``qa-load`` and
``capacity`` run it around every run or step: :func:`sampled`).

    ernie-chat cpu-during OUT.json &  ...the load: qa-load, capacity, bench...  ; kill -INT $!

The signal must reach the sampler itself (its PID, or its process group): a shell that waits
for it, as ``bash -c '... cpu-during ...'`` does, keeps a SIGINT to itself (bash waits for its
child first), and one killed by SIGTERM leaves its children running. So the sampler also stops,
and writes its samples, when its parent dies (Linux's parent-death signal).

Until it is interrupted the sampler reads, every 50 ms (~57 ms with the reading itself), how
much CPU each process used (/proc/PID/stat), grouped by what the process is (its command line:
the app's workers, vLLM's API servers and engine core, HAProxy, the load clients). The
machine's busy cores are the sum over every process it sees, not /proc/stat's first line: on
the lent H200 that line counts the whole host's cores, not the 16 the container has (it read
0.5-1.0 busy cores while the processes summed to 7-8). On SIGINT or SIGTERM it writes the
samples and prints the busy cores, by group, in the busiest second and over the whole run;
benchmarks/gpu/burst_table.py reads the samples for a burst's first second and its first
100-ms steps (the samples' ``t`` is the monotonic clock that qa-load's ``sent_at`` reads).

Why: on the lent H200s neither fewer messages per worker (12 workers against 8) nor a
cheaper message (the loop without nest_asyncio) moved a 1,000-chat burst's wait before the
handler out of the noise (docs/performance.md, "Bursts: chats that send at the same
instant"): is the machine's every core
busy in the burst's first second, and with what? The same question sizes a machine for a
crowd.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# vLLM's /proc figures are in clock ticks.
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# The sampler's period: steps of 100 ms in a burst still span two samples.
PERIOD_S = 0.05
# qa-load's and capacity's sampler reports whole runs: a slower one costs the machine less
# (one pass over /proc takes a few ms of CPU with a few hundred processes).
RUN_PERIOD_S = 0.5
# prctl(2)'s option that sends the process a signal when its parent exits.
PR_SET_PDEATHSIG = 1
# Checked in order against a process's command line (vLLM sets its processes' titles).
GROUPS = (("engine core", "EngineCore"), ("engine workers", "VLLM::Worker"),
          ("API servers", "APIServer"), ("API servers", "vllm_serve"), ("supervisor", "server.cli up"),
          ("app workers", "app.serve"), ("app workers", "chainlit run"), ("balancer", "haproxy"),
          ("load clients", "server.cli qa-load"), ("load clients", "server.cli bench"),
          ("load clients", "server.cli capacity"),
          ("load clients", "server.loadtest."))


def cpu_seconds(stat: str) -> float:
    """utime + stime of one process from the text of /proc/PID/stat.

    The command name (field 2) may hold spaces and parentheses, so fields are
    counted after its closing parenthesis: utime and stime are fields 14 and 15.
    """
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def process_cpu_s(pid: int) -> float:
    return cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def group_of(cmdline: str) -> str:
    return next((name for name, needle in GROUPS if needle in cmdline), "other")


class Processes:
    """Each process's CPU since the sampler began (or since it started, if later), kept after
    it exits: a load client that finishes before the sampler stops still counts."""

    def __init__(self) -> None:
        self.seen: dict[str, list] = {}  # pid -> [group, CPU-s at first sight, CPU-s last seen]
        self.first = True

    def read(self) -> dict[str, float]:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                used_s = process_cpu_s(int(pid))
                if pid not in self.seen:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                    self.seen[pid] = [group_of(cmdline.decode(errors="replace")),
                                      used_s if self.first else 0.0, used_s]
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            self.seen[pid][2] = used_s
        self.first = False
        used: dict[str, float] = {}
        for group, first, last in self.seen.values():
            used[group] = used.get(group, 0) + last - first
        return used


def sample(processes: Processes) -> dict:
    return {"t": time.monotonic(), "groups": processes.read()}


def cores(first: dict, last: dict) -> dict:
    """Busy cores between two samples: each group's, and the machine's (their sum)."""
    span_s = last["t"] - first["t"]
    if span_s <= 0:
        return {}
    out = {name: (used_s - first["groups"].get(name, 0.0)) / span_s for name, used_s in last["groups"].items()}
    return {"machine": sum(out.values()), **out}


def window(samples: list[dict], start_t: float, length_s: float = 1.0) -> dict:
    """Busy cores from the first sample at or after ``start_t`` to the last within ``length_s``."""
    inside = [s for s in samples if start_t <= s["t"] <= start_t + length_s]
    return cores(inside[0], inside[-1]) if len(inside) >= 2 else {}


def steps(samples: list[dict], start_t: float, step_s: float = 0.1, count: int = 6) -> list[dict]:
    """Busy cores in ``count`` steps of ``step_s`` from ``start_t``, each between the samples
    that bracket it (a step shorter than the sampling period spans two samples)."""
    out = []
    for k in range(count):
        begin, end = start_t + k * step_s, start_t + (k + 1) * step_s
        before = [s for s in samples if s["t"] <= begin]
        after = [s for s in samples if s["t"] >= end]
        out.append(cores(before[-1], after[0]) if before and after else {})
    return out


def busiest(samples: list[dict], length_s: float = 1.0) -> dict:
    """The ``length_s`` window in which the machine was busiest."""
    windows = (window(samples, s["t"], length_s) for s in samples if s["t"] + length_s <= samples[-1]["t"])
    return max(windows, key=lambda w: w.get("machine", 0), default={})


def summary(samples: list[dict]) -> dict:
    if len(samples) < 2:
        return {}
    return {"cores": len(os.sched_getaffinity(0)), "busiest_1s": busiest(samples), "whole": cores(samples[0], samples[-1]),
            "seconds": samples[-1]["t"] - samples[0]["t"]}


def describe(figures: dict, label: str, of: int) -> str:
    """One line: the machine's busy cores, then each group's, busiest first."""
    parts = ", ".join(f"{name} {value:.1f}" for name, value in sorted(figures.items(), key=lambda kv: -kv[1])
                      if name != "machine" and value >= 0.05)
    return f"busy cores, {label}: {figures.get('machine', 0):.1f} of {of} ({parts})"


def add_parser(sub) -> None:
    cpu = sub.add_parser(
        "cpu-during", help="the machine's CPU by kind of process while a load runs",
        description="Sample every process's CPU (/proc) every 50 ms until interrupted (SIGINT, "
        "SIGTERM or SIGHUP to its PID or process group, or its parent's end), grouped by what it "
        "runs (engine, API servers, app workers, balancer, load clients); then write the samples "
        "to OUT and print the busy cores, by group, in the busiest second and over the whole run.")
    cpu.add_argument("out", type=Path, metavar="OUT.json", help="where the samples go")
    cpu.add_argument("--period-s", type=float, default=PERIOD_S,
                     help=f"seconds between samples (default {PERIOD_S:g})")
    cpu.set_defaults(func=cmd_cpu_during)


def stop_with_parent() -> None:
    """SIGTERM when the parent exits (Linux; elsewhere nothing): a shell killed around the
    sampler takes it down cleanly, its samples written, instead of leaving it running."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return


def cmd_cpu_during(args: argparse.Namespace) -> int:
    if not 0.01 <= args.period_s <= 60:
        print("ERROR: --period-s must be between 0.01 and 60.", file=sys.stderr)
        return 2
    samples: list[dict] = []
    processes = Processes()
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.append(True))
    stop_with_parent()
    samples.append(sample(processes))
    # The first line says the sampler is running, its first sample taken: a script starts its
    # load after it, and a signal at once still leaves two samples (the last is taken on it).
    print(f"sampling every {args.period_s * 1000:.0f} ms until interrupted", flush=True)
    while not stop:
        time.sleep(args.period_s)
        samples.append(sample(processes))
    if len(samples) < 2:  # stopped before its second
        samples.append(sample(processes))
    result = summary(samples)
    args.out.write_text(json.dumps({**result, "samples": samples}))
    if result:
        print(describe(result["busiest_1s"], "the busiest second", result["cores"]))
        print(describe(result["whole"], f"the whole {result['seconds']:.1f} s", result["cores"]))
    return 0


# --- around a run of qa-load or capacity ------------------------------------------------------

@contextmanager
def sampled(period_s: float = RUN_PERIOD_S) -> Iterator[dict]:
    """The machine's CPU by kind of process while the block runs, from a ``cpu-during`` child
    (a process of its own: a thread would take the load client's interpreter lock, and its
    timings with it). The dict given is filled once the block ends: :func:`run_figures`'s
    keys, or nothing where the sampler wrote no result."""
    from server.paths import ROOT
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="cpu-during-") as folder:
        out = Path(folder) / "cpu.json"
        child = subprocess.Popen([sys.executable, "-m", "server.cli", "cpu-during", str(out),
                                  "--period-s", str(period_s)], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            child.stdout.readline()  # "sampling ...": it has started (or failed: no result)
            yield figures
        finally:
            child.send_signal(signal.SIGINT)
            child.communicate(timeout=60)
        if out.is_file():
            figures.update(run_figures(json.loads(out.read_text())))


def run_figures(result: dict) -> dict:
    """A sampler's result without its samples: the machine's cores, the seconds sampled, the
    busy cores of each kind of process and their sum (``machine``)."""
    if not result.get("whole"):
        return {}
    return {"cores": result["cores"], "seconds": result["seconds"], "busy_cores": result["whole"]}


def per_1k_tokens(figures: dict, tokens: int) -> dict:
    """CPU-seconds of each kind of process per 1,000 tokens streamed in the run."""
    if not figures or not tokens:
        return {}
    return {name: cores * figures["seconds"] / tokens * 1000 for name, cores in figures["busy_cores"].items()}


def with_tokens(figures: dict, tokens: int) -> dict:
    """What a run's JSON keeps as its ``cpu``: the figures, and per 1,000 tokens streamed."""
    return {**figures, "tokens": tokens, "cpu_s_per_1k_tokens": per_1k_tokens(figures, tokens)} if figures else {}


def render_run(cpu: dict) -> str:
    """The printed lines: busy cores by kind, and the CPU-seconds per 1,000 tokens of each."""
    if not cpu:
        return "  CPU by kind of process: not sampled"
    lines = ["  " + describe(cpu["busy_cores"], f"{cpu['seconds']:.0f} s", cpu["cores"])]
    per = cpu.get("cpu_s_per_1k_tokens") or {}
    if per:
        parts = ", ".join(f"{name} {value:.3f}" for name, value in sorted(per.items(), key=lambda kv: -kv[1])
                          if name != "machine" and value >= 0.0005)
        lines.append(f"  CPU-s per 1,000 tokens: {per['machine']:.3f} ({parts})")
    return "\n".join(lines)


# The reports' note under the table.
TABLE_NOTE = ("Busy cores: CPU-seconds per second of the run, summed over the processes of each kind "
              "on the machine that ran the load (read from /proc every 0.5 s); per 1,000 tokens: "
              "CPU-seconds over the reply tokens streamed in the run.")


def table(runs: list[tuple[object, dict]], label: str = "run") -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of report.html's table: a row per run, a column per kind of process seen,
    each "busy cores (CPU-s per 1,000 tokens)"."""
    kinds = [name for name, _ in GROUPS] + ["other"]
    seen = {name for _, figures in runs for name in figures["busy_cores"]}
    columns = ["machine"] + [name for name in dict.fromkeys(kinds) if name in seen]

    def cell(figures: dict, name: str) -> str:
        busy = figures["busy_cores"].get(name)
        per = (figures.get("cpu_s_per_1k_tokens") or {}).get(name)
        return "-" if busy is None else f"{busy:.2f}" + ("" if per is None else f" ({per:.3f})")
    rows = [[str(key), str(figures["cores"])] + [cell(figures, name) for name in columns] for key, figures in runs]
    return [label, "cores"] + columns, rows
