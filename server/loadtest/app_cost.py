"""``ernie-chat bench --app-cost``: the chat app's CPU per 1,000 streamed tokens.

One Chainlit process is the limit of a crowd (docs/notes.md, "Measured on the
H200"): what matters is how many CPU-seconds the app process spends for every
1,000 tokens it streams to browsers.  This starts the app (the supervisor's own
code, on the engine given), runs ``qa-load`` bursts of long replies
(``ignore_eos``, so every reply is exactly ``--output-len`` tokens) and reads the
app's CPU time from ``/proc/PID/stat`` before and after each run: utime + stime,
divided by the reply tokens the chats received (each reply's own count, from its
figures line).  The CPU includes opening and closing the chats, as a real crowd's
would.  Each level is run ``--repetitions`` times; mean and spread are printed.

``--app-root DIR`` runs the app of another checkout (e.g. main's, for the figure
"before"), ``--app-env K=V`` gives the app process an environment variable (e.g.
``UVICORN_WS_PER_MESSAGE_DEFLATE=false``), and ``--profile`` records one py-spy
flame graph per level (py-spy slows the process it samples, so those runs are
not among the measured ones).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean, pstdev
from typing import Optional

from server.loadtest.config import BenchError
from server.loadtest.qa_load import DEFAULT_PROMPTS, render, run_load

# vLLM's /proc figures are in clock ticks.
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# Long enough for 64 replies of 512 tokens from the 2-core CPU engine, with room.
RUN_TIMEOUT_S = 600.0
WARMUP_SESSIONS = 4


def cpu_seconds(stat: str) -> float:
    """utime + stime of one process from the text of /proc/PID/stat.

    The command name (field 2) may hold spaces and parentheses, so fields are
    counted after its closing parenthesis: utime and stime are fields 14 and 15.
    """
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def process_cpu_s(pid: int) -> float:
    return cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


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


def summarize(runs: list[CostRun]) -> dict:
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
    """The chat app, started by the supervisor's code against ``engine_url``."""

    def __init__(self, engine_url: str, output_len: int, root: Path, env: dict[str, str],
                 out_dir: Path):
        from server.settings import load_settings
        from server.stack.processes import free_port
        from server.stack.supervisor import Stack
        self.settings = load_settings(engine_url=engine_url, ignore_eos=True, max_tokens=output_len,
                                      app_port=free_port(), log_file=out_dir / "llm.log",
                                      usage_log=out_dir / "usage.jsonl", chat_db=None)
        self.stack = Stack(self.settings, root=root)
        self.stack.app = self.stack.prepare_app()
        self.stack.app.env.update(env)

    def __enter__(self) -> "ProfiledApp":
        try:
            self.stack.start_app()
        except BaseException:
            self.stack.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stack.stop()

    @property
    def pid(self) -> int:
        return self.stack.app.pid

    @property
    def url(self) -> str:
        return self.settings.app_url


def reply_tokens(result: dict) -> int:
    return sum(c["reply_tokens"] or 0 for c in result["sessions"] if c["complete"])


def measured_run(app: ProfiledApp, sessions: int) -> tuple[CostRun, dict]:
    before = process_cpu_s(app.pid)
    result = asyncio.run(run_load(app.url, list(DEFAULT_PROMPTS), sessions, RUN_TIMEOUT_S))
    cpu = process_cpu_s(app.pid) - before
    s = result["summary"]
    run = CostRun(sessions, cpu, reply_tokens(result), s["wall_s"], s["complete"],
                  s["ttft_ms"]["median"], s["ttft_ms"]["p99"])
    return run, result


def profile_run(app: ProfiledApp, sessions: int, svg: Path) -> None:
    """One burst under ``py-spy record``; the flame graph goes to ``svg``."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        raise BenchError("--profile needs py-spy (pip install --no-deps py-spy==0.4.3).")
    spy = subprocess.Popen([py_spy, "record", "--pid", str(app.pid), "--rate", "200",
                            "--output", str(svg), "--format", "flamegraph"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # py-spy attaches
        asyncio.run(run_load(app.url, list(DEFAULT_PROMPTS), sessions, RUN_TIMEOUT_S))
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes the graph on SIGINT
        _, err = spy.communicate(timeout=120)
    if not svg.exists():
        raise BenchError(f"py-spy wrote no profile: {err.decode(errors='replace')[-500:]}")


def run(engine_url: str, levels: tuple[int, ...], output_len: int, repetitions: int,
        root: Path, env: dict[str, str], out_dir: Path, profile: bool, label: str) -> int:
    if repetitions < 1 or output_len < 1:
        raise BenchError("--repetitions and --output-len must be at least 1.")
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[CostRun] = []
    with ProfiledApp(engine_url, output_len, root, env, out_dir) as app:
        asyncio.run(run_load(app.url, list(DEFAULT_PROMPTS), WARMUP_SESSIONS, RUN_TIMEOUT_S))
        for sessions in levels:
            if profile:
                profile_run(app, sessions, out_dir / f"profile-{sessions}-chats.svg")
            for rep in range(repetitions):
                cost, result = measured_run(app, sessions)
                print(render(result), file=sys.stderr)
                print(f"  {sessions} chats, run {rep + 1}/{repetitions}: {cost.cpu_s:.2f} CPU-s for "
                      f"{cost.reply_tokens} tokens = {cost.cpu_s_per_1k_tokens or 0:.4f} CPU-s per "
                      "1,000 tokens", file=sys.stderr, flush=True)
                runs.append(cost)
    summary = summarize(runs)
    print(render_summary(summary, label))
    result = {"kind": "ernie-chat app-cost", "label": label,
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "engine_url": engine_url,
              "app_root": str(root), "app_env": env, "output_len": output_len,
              "summary": summary,
              "runs": [{**asdict(r), "cpu_s_per_1k_tokens": r.cpu_s_per_1k_tokens} for r in runs]}
    path = out_dir / "app-cost.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out_dir / "app-cost.txt").write_text(render_summary(summary, label) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0 if all(level["all_complete"] for level in summary.values()) else 1
