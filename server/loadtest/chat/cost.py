"""``ernie-chat bench --app-cost``: the chat app's CPU per 1,000 streamed tokens.

One Chainlit process is the limit of a crowd (docs/performance.md, "The
app's CPU"): what matters is how many CPU-seconds the app process spends for every
1,000 tokens it streams to browsers.  This starts the app (the supervisor's own
code, on the engine given), runs ``qa-load`` bursts of long replies
(``ignore_eos``, so every reply is exactly ``--output-len`` tokens) and reads the
app's CPU time from ``/proc/PID/stat`` before and after each run: utime + stime,
divided by the reply tokens the chats received (each reply's own count, from its
figures line).  The CPU includes opening and closing the chats, as a real crowd's
would.  Each level is run ``--repetitions`` times; mean and spread are printed.

``--app-root DIR`` runs the app of another checkout, ``--app-env K=V`` gives the app
process an environment variable (e.g. ``UVICORN_WS_PER_MESSAGE_DEFLATE=false``).
``--baseline-root DIR`` (and ``--baseline-env``) starts a second app, e.g. main's, and
runs the two in alternating order (A B B A), so a change in the machine's load, which on a shared
2-core box moves the figure by +-30 %, hits both alike; the ratio of paired runs is
printed.  ``--profile`` records one py-spy profile per app and level (py-spy slows the
process it samples, so those runs are not among the measured ones): its collapsed stacks
(``profile-<app>-<chats>-chats.txt``, for flamegraph.pl or speedscope) and the functions
that held the CPU most, by their own samples and with what they called (``...-top.txt``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean, pstdev
from typing import Iterator, Optional

from server.loadtest.lib.cpu import process_cpu_s
from server.loadtest.chat.qa_load import render, run_load, streamed_tokens
from server.loadtest.lib.chat_socket import DEFAULT_PROMPTS
from server.loadtest.lib.config import BenchError

# Long enough for 64 replies of 512 tokens from the 2-core CPU engine, with room.
RUN_TIMEOUT_S = 600.0
WARMUP_SESSIONS = 4


@dataclass
class CostRun:
    """One burst: ``sessions`` chats, each one reply; CPU of the app process over it."""

    sessions: int
    cpu_s: float
    reply_tokens: int
    wall_s: float
    complete: int
    ttft_p50_ms: Optional[float]
    ttft_p99_ms: Optional[float]

    @property
    def cpu_s_per_1k_tokens(self) -> Optional[float]:
        return self.cpu_s / self.reply_tokens * 1000 if self.reply_tokens else None


def spread(values: list[float]) -> dict:
    """Mean, population standard deviation, min and max; empty values give None."""
    if not values:
        return {"mean": None, "stdev": None, "min": None, "max": None, "n": 0}
    return {"mean": fmean(values), "stdev": pstdev(values), "min": min(values),
            "max": max(values), "n": len(values)}


def summarize_cost_runs(runs: list[CostRun]) -> dict:
    """Per number of chats: the spread of CPU-s per 1,000 tokens and of TTFT p50."""
    out = {}
    for sessions in sorted({r.sessions for r in runs}):
        level = [r for r in runs if r.sessions == sessions]
        out[str(sessions)] = {
            "cpu_s_per_1k_tokens": spread([r.cpu_s_per_1k_tokens for r in level
                                           if r.cpu_s_per_1k_tokens is not None]),
            "ttft_p50_ms": spread([r.ttft_p50_ms for r in level if r.ttft_p50_ms is not None]),
            "all_complete": all(r.complete == r.sessions for r in level),
        }
    return out


def render_summary(summary: dict, label: str) -> str:
    lines = [f"App CPU per 1,000 streamed tokens ({label}):",
             "  chats  runs  CPU-s/1k tok: mean  stdev   min    max    TTFT p50 ms (mean)  complete"]
    for sessions, level in summary.items():
        c, t = level["cpu_s_per_1k_tokens"], level["ttft_p50_ms"]
        fmt = lambda v: "-" if v is None else f"{v:.4f}"
        lines.append(f"  {sessions:>5}  {c['n']:>4}  {fmt(c['mean']):>17}  {fmt(c['stdev'])} "
                     f"{fmt(c['min'])} {fmt(c['max'])}  {t['mean'] or 0:>18.0f}  "
                     f"{'yes' if level['all_complete'] else 'NO'}")
    return "\n".join(lines)


def render_ratio(ratio: dict, measured: str, baseline: str) -> str:
    lines = [f"CPU per token, {measured} / {baseline} (runs paired in alternating order):"]
    for sessions, r in ratio.items():
        lines.append(f"  {sessions:>5} chats: {r['mean']:.3f} (min {r['min']:.3f}, max {r['max']:.3f}, "
                     f"{r['n']} pairs)" if r["n"] else f"  {sessions:>5} chats: -")
    return "\n".join(lines)


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise BenchError(f"--app-env {pair!r}: write it as NAME=VALUE.")
        env[name] = value
    return env


# --- the app and the runs (I/O) -------------------------------------------------------

class ProfiledApp:
    """One Chainlit worker of the checkout ``root``, started by the stack's own app tier
    against ``engine_url`` (no balancer: the figures are the app's alone), sending it
    ``api_key`` where one is given (else ERNIE_API_KEY's)."""

    def __init__(self, engine_url: str, output_len: int, root: Path, env: dict[str, str],
                 out_dir: Path, api_key: Optional[str] = None):
        from server.settings import load_settings
        from server.stack.app_tier import AppTier
        from server.stack.processes import free_port
        self.settings = load_settings(engine_url=engine_url, ignore_eos=True, max_tokens=output_len,
                                      app_port=free_port(), app_workers=1,
                                      log_file=out_dir / "llm.log",
                                      usage_log=out_dir / "usage.jsonl", chat_db=None,
                                      **({"api_key": api_key} if api_key else {}))
        s = self.settings
        self.tier = AppTier(s, s.app_host, (s.app_port,), s.engine_base_url, root,
                            out_dir / "llm.log")
        self.worker = self.tier.workers[0]
        self.worker.proc.env.update(env)

    def __enter__(self) -> "ProfiledApp":
        try:
            self.tier.start_all()
        except BaseException:
            self.tier.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.tier.stop()

    @property
    def pid(self) -> int:
        return self.worker.proc.pid

    @property
    def url(self) -> str:
        return self.worker.url


def measured_run(app: ProfiledApp, sessions: int) -> tuple[CostRun, dict]:
    before = process_cpu_s(app.pid)
    result = asyncio.run(run_load(app.url, list(DEFAULT_PROMPTS), sessions, RUN_TIMEOUT_S))
    cpu = process_cpu_s(app.pid) - before
    s = result["summary"]
    run = CostRun(sessions, cpu, streamed_tokens(result), s["wall_s"], s["complete"],
                  s["ttft_ms"]["median"], s["ttft_ms"]["p99"])
    return run, result


@contextmanager
def py_spy(pid: int, output: Path, fmt: str = "flamegraph", rate: int = 200, gil: bool = False) -> Iterator[None]:
    """``py-spy record`` of process ``pid`` while the block runs; its profile goes to ``output``
    (``fmt``: py-spy's ``flamegraph``, or ``raw`` collapsed stacks); ``gil``: only the thread
    that holds the interpreter (what the event loop and its callbacks cost, not the threads
    that wait in a system call)."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(binary).exists():
        raise BenchError("--profile needs py-spy (pip install --no-deps py-spy==0.4.3).")
    spy = subprocess.Popen([binary, "record", "--pid", str(pid), "--rate", str(rate),
                            "--output", str(output), "--format", fmt] + (["--gil"] if gil else []),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # py-spy attaches
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes the profile on SIGINT
        _, err = spy.communicate(timeout=120)
    if not output.exists():
        raise BenchError(f"py-spy wrote no profile: {err.decode(errors='replace')[-500:]}")


def profile_run(app: ProfiledApp, sessions: int, stacks: Path) -> None:
    """One burst under ``py-spy record``: collapsed stacks to ``stacks``, the top functions
    beside it (``-top.txt``)."""
    with py_spy(app.pid, stacks, "raw", gil=True):
        asyncio.run(run_load(app.url, list(DEFAULT_PROMPTS), sessions, RUN_TIMEOUT_S))
    stacks.with_name(stacks.stem + "-top.txt").write_text(render_top(top_frames(stacks.read_text())) + "\n")


def frame_name(frame: str) -> str:
    """A py-spy frame, ``function (file:line)``, without its line: one row per function."""
    name, sep, where = frame.rpartition(" (")
    return f"{name} ({where.rsplit(':', 1)[0].rstrip(')')})" if sep else frame


def top_frames(collapsed: str, count: int = 25) -> dict:
    """From py-spy's collapsed stacks (``f1;f2;...;fN samples`` per line): the functions with
    the most samples of their own and with the most samples in all (themselves or below),
    each as a share of all samples."""
    own: dict[str, int] = {}
    inside: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        frames = [frame_name(f) for f in stack.split(";")]
        n = int(samples)
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            inside[frame] = inside.get(frame, 0) + n
    share = lambda table: [(name, n / total) for name, n in sorted(table.items(), key=lambda kv: -kv[1])[:count]]
    return {"samples": total, "own": share(own) if total else [], "inside": share(inside) if total else []}


def render_top(top: dict) -> str:
    lines = [f"{top['samples']} samples (py-spy, CPU only)", "", "own samples:"]
    lines += [f"  {100 * s:5.1f} %  {name}" for name, s in top["own"]]
    lines += ["", "with what they called:"]
    lines += [f"  {100 * s:5.1f} %  {name}" for name, s in top["inside"]]
    return "\n".join(lines)


@dataclass(frozen=True)
class Variant:
    """One app to measure: a checkout and the environment its process gets."""

    label: str
    root: Path
    env: dict


def alternate(variants: list[Variant], repetitions: int) -> list[Variant]:
    """Alternating order (A B B A): a drift in the machine's load hits every variant alike."""
    order = []
    for rep in range(repetitions):
        order += variants if rep % 2 == 0 else list(reversed(variants))
    return order


def add_variant_arguments(parser: argparse.ArgumentParser) -> None:
    """The apps a benchmark script compares: this checkout's, and a baseline's."""
    parser.add_argument("--app-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--baseline-root", type=Path)
    parser.add_argument("--baseline-env", action="append", default=[], metavar="NAME=VALUE",
                        help="the baseline's environment; with it alone the baseline is this checkout")
    parser.add_argument("--pairs", type=int, default=3, help="alternating pairs with a baseline")


def variants_from(args: argparse.Namespace, root: Path) -> list[Variant]:
    """This checkout (``root``) alone, or with the baseline in alternating order."""
    order = [Variant("this", root, parse_env(args.app_env))]
    if args.baseline_root or args.baseline_env:
        baseline = Variant("baseline", (args.baseline_root or root).resolve(), parse_env(args.baseline_env))
        order = alternate(order + [baseline], args.pairs)
    return order


def ratios(runs: dict[str, list[CostRun]], measured: str, baseline: str) -> dict:
    """Per number of chats: measured / baseline CPU per token, over runs paired in order."""
    out = {}
    for sessions in sorted({r.sessions for r in runs[measured]}):
        pairs = [(m.cpu_s_per_1k_tokens, b.cpu_s_per_1k_tokens) for m, b in zip(
            [r for r in runs[measured] if r.sessions == sessions],
            [r for r in runs[baseline] if r.sessions == sessions]) if m and b]
        out[str(sessions)] = spread([m / b for m, b in pairs])
    return out


def run(engine_url: str, levels: tuple[int, ...], output_len: int, repetitions: int,
        variants: list[Variant], out_dir: Path, profile: bool, api_key: Optional[str] = None) -> int:
    """Measure each variant (the first is the one asked for, a second the baseline)."""
    if repetitions < 1 or output_len < 1:
        raise BenchError("--repetitions and --output-len must be at least 1.")
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[CostRun]] = {v.label: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="app-cost-") as logs, ExitStack() as stack:
        apps = {v.label: stack.enter_context(ProfiledApp(engine_url, output_len, v.root, v.env,
                                                         Path(logs) / str(i), api_key))
                for i, v in enumerate(variants)}
        for app in apps.values():
            asyncio.run(run_load(app.url, list(DEFAULT_PROMPTS), WARMUP_SESSIONS, RUN_TIMEOUT_S))
        for sessions in levels:
            for i, variant in enumerate(variants if profile else []):
                profile_run(apps[variant.label], sessions, out_dir / f"profile-{i}-{sessions}-chats.txt")
            for n, variant in enumerate(alternate(variants, repetitions)):
                cost, result = measured_run(apps[variant.label], sessions)
                print(render(result), file=sys.stderr)
                print(f"  {variant.label}, {sessions} chats, run {n + 1}/{len(variants) * repetitions}: "
                      f"{cost.cpu_s:.2f} CPU-s for {cost.reply_tokens} tokens = "
                      f"{cost.cpu_s_per_1k_tokens or 0:.4f} CPU-s per 1,000 tokens",
                      file=sys.stderr, flush=True)
                runs[variant.label].append(cost)
                if not result["summary"]["ok"]:  # every chat as it was, to see what went wrong
                    failed = out_dir / f"failed-{variants.index(variant)}-{sessions}-chats-{n}.json"
                    failed.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    summaries = {label: summarize_cost_runs(r) for label, r in runs.items()}
    text = "\n\n".join(render_summary(summary, label) for label, summary in summaries.items())
    result = {"kind": "ernie-chat app-cost", "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "engine_url": engine_url, "output_len": output_len,
              "variants": [{"label": v.label, "app_root": str(v.root), "app_env": v.env,
                            "profile": f"profile-{i}-<chats>-chats.txt" if profile else None}
                           for i, v in enumerate(variants)],
              "summary": summaries,
              "runs": {label: [{**asdict(r), "cpu_s_per_1k_tokens": r.cpu_s_per_1k_tokens}
                               for r in rs] for label, rs in runs.items()}}
    if len(variants) == 2:
        result["ratio"] = ratios(runs, variants[0].label, variants[1].label)
        text += "\n\n" + render_ratio(result["ratio"], variants[0].label, variants[1].label)
    print(text)
    path = out_dir / "app-cost.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out_dir / "app-cost.txt").write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0 if all(level["all_complete"] for summary in summaries.values()
                    for level in summary.values()) else 1
