"""``ernie-chat tune``: measure engine settings instead of guessing them.

For every point of a sweep (memory x max-model-len x max-num-seqs x
max-num-batched-tokens) it starts vLLM with exactly the command ``up`` would
use (engine_args.engine_command), waits until it serves, reads the KV pool vLLM
really made from its log, runs the same bench load against it, and stops it.
The setting chosen is the one with the best goodput among those that serve
the longest request the user needs, like vLLM's ``benchmarks/auto_tune`` but
with our settings and our bench.

Memory is ``--utilization`` on a GPU and ``--kv-cache-gib`` on a CPU, where
utilization does not size anything (engine_args).  Each engine runs in its own
process group with its own log in the results folder and is stopped in a
``finally``: Ctrl-C, SIGTERM, a failed start and the time limits all leave no
engine behind.  The chosen values go into ``.env`` only with ``--write-env``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from server.loadtest import bench, report
from server.loadtest.config import BenchConfig, BenchError
from server.loadtest.run import run_bench
from server.loadtest.tune_choice import (
    Outcome,
    Point,
    TuneError,
    choose,
    explain,
    plot_rows,
    render_table,
    sweep,
)
from server.paths import RESULTS_DIR, ROOT
from server.plan import kv_planner as kp
from server.plan.device import resolve_device
from server.progress import StatusLine, StepFailed
from server.settings import Settings, load_settings
from server.stack import doctor, provision
from server.stack.engine_args import engine_command
from server.stack.model_source import choose_model
from server.stack.processes import ManagedProcess, free_port
from server.stack.readiness import probe_engine, wait_until
from server.stack.supervisor import Shutdown, raise_shutdown
from server.stack.vllm_log import START_MARKER, parse_kv_report, read_tail

# --- running the sweep ---------------------------------------------------------------------

@dataclass
class Sweep:
    """Everything the points share."""

    settings: Settings
    model: str
    device: str
    python: Path
    engine_args: str
    load: BenchConfig
    out_dir: Path
    point_timeout_s: float
    deadline: float  # time.monotonic() at which the whole sweep stops
    points: list[Point] = field(default_factory=list)


@contextlib.contextmanager
def signals_ignored():
    """A second Ctrl-C must not interrupt the stop that frees the memory."""
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def failure_reason(log: Path) -> str:
    lines = read_tail(log)
    findings = doctor.diagnose(lines, since_last_start=True)
    if findings:
        return f"{findings[0].title}: {findings[0].detail}"
    return " / ".join(l.strip()[-160:] for l in doctor.last_error_lines(lines, 2)) or "no output"


def run_point(n: int, sweep_: Sweep, outcome: Outcome) -> None:
    """Start the engine for ``outcome.point``, measure it, stop it; fills ``outcome``."""
    point = outcome.point
    settings = sweep_.settings.model_copy(update={
        **point.overrides(), "engine_host": "127.0.0.1", "engine_port": free_port(),
        "extra_engine_args": f"{sweep_.settings.extra_engine_args} {sweep_.engine_args}".strip()})
    command = engine_command(settings, sweep_.model, sweep_.device, sweep_.python)
    log = sweep_.out_dir / f"point-{n:02d}-engine.log"
    engine = ManagedProcess("engine", command.argv, log, env=command.env, cwd=ROOT, marker=START_MARKER)
    point_deadline = min(time.monotonic() + sweep_.point_timeout_s, sweep_.deadline)
    status = StatusLine(f"tune {n}/{len(sweep_.points)}")
    outcome.port = settings.engine_port
    try:
        engine.start()
        outcome.pid = engine.pid
        url = settings.engine_base_url
        entry = wait_until(lambda: probe_engine(url, settings.api_key_value), lambda: not engine.alive(),
                           point_deadline - time.monotonic(), status,
                           lambda: f"starting vLLM ({point.label()}), log {log.name}")
        if not entry:
            outcome.status = "failed"
            outcome.reason = (failure_reason(log) if not engine.alive() else
                              "not ready within the time limit (--point-timeout-s/--total-timeout-s)")
            status.done(f"{point.label()}: {outcome.reason}")
            return
        outcome.startup_s = status.elapsed
        outcome.served_max_model_len = int(entry.get("max_model_len") or point.max_model_len)
        kv = parse_kv_report(read_tail(log))
        outcome.kv_tokens, outcome.kv_memory_gib = kv.kv_tokens, kv.kv_memory_gib
        outcome.kv_concurrency = kv.max_concurrency
        status.done(f"{point.label()}: ready in {outcome.startup_s:.0f} s, KV cache "
                    f"{kv.kv_tokens or '?'} tokens")
        # The point's time limit bounds the load and every wait for a chunk.
        left = max(1.0, point_deadline - time.monotonic())
        cfg = replace(sweep_.load, url=url, model=entry.get("id"), api_key=settings.api_key_value,
                      max_seconds=min(sweep_.load.max_seconds, left),
                      request_timeout_s=min(sweep_.load.request_timeout_s, left))
        result = asyncio.run(run_bench(cfg))
        report.save(result, sweep_.out_dir / f"point-{n:02d}", plots=False)
        outcome.summary = result.levels[0].summary if result.levels else None
        outcome.status = "measured"
        if not engine.alive():
            outcome.status, outcome.reason = "failed", f"vLLM exited under load: {failure_reason(log)}"
        elif not outcome.summary:
            outcome.status, outcome.reason = "failed", "the time limit left no time for the load"
    except BenchError as exc:
        outcome.status, outcome.reason = "failed", str(exc)
    finally:
        with signals_ignored():
            engine.stop()


def run_sweep(sweep_: Sweep, outcomes: list[Outcome]) -> None:
    """Fill ``outcomes`` (one per point) in place, so an interrupted sweep keeps what it measured."""
    for n, outcome in enumerate(outcomes, 1):
        if time.monotonic() >= sweep_.deadline:
            outcome.reason = "the sweep's time limit (--total-timeout-s) was reached"
            continue
        run_point(n, sweep_, outcome)


def save(outcomes: list[Outcome], chosen: Optional[Outcome], need: int, need_source: str,
         explanation: str, sweep_: Sweep) -> list[Path]:
    path = sweep_.out_dir / "tune.json"
    path.write_text(json.dumps({
        "kind": "ernie-chat tune",
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command_line": shlex.join(sys.argv),
        "model": sweep_.model, "device": sweep_.device, "engine_python": str(sweep_.python),
        "engine_args": sweep_.engine_args,
        "need_max_model_len": need, "need_source": need_source,
        "load": sweep_.load.as_dict(),
        "points": [o.as_dict() for o in outcomes],
        "chosen": outcomes.index(chosen) if chosen else None,
        "chosen_env": chosen.point.env_values() if chosen else None,
        "explanation": explanation,
    }, indent=1) + "\n", encoding="utf-8")
    paths = [path]
    try:
        from server.loadtest import plots
        rows = plot_rows(outcomes, chosen, need)
        paths.append(plots.plot_tune(rows, need, sweep_.out_dir / "tune.png"))
    except ImportError as exc:
        print(f"[tune] plot skipped ({exc})")
    return paths


# --- inputs ----------------------------------------------------------------------------------

def needed_max_model_len(args: argparse.Namespace, settings: Settings, device: str) -> tuple[int, str]:
    """What the chosen setting must serve: the flag, else the usage log's advice, else the setting."""
    if args.need_max_model_len:
        return args.need_max_model_len, "--need-max-model-len"
    if settings.usage_log.exists():
        from server.plan.report import usage_report
        try:
            usage = usage_report(settings.usage_log, kp.BLOCK_SIZE[device], None)
            return (usage["recommended_max_model_len"], f"`plan --from-usage` advice from "
                    f"{usage['requests']} requests in {settings.usage_log}")
        except ValueError:
            pass  # a log without usable records: fall back to the setting
    return settings.max_model_len, "ERNIE_MAX_MODEL_LEN"


def float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def batch_list(text: str) -> tuple[Optional[int], ...]:
    """Integers, and ``default`` for the setting as it is (vLLM's own choice unless set).

    vLLM sizes its batch limits by the device: on an H200 its default beat every cap
    tried for this model (docs/gpu-results.md), so a sweep should be able to include it.
    """
    values = []
    for value in text.split(","):
        value = value.strip()
        if value == "default":
            values.append(None)
        elif value.isdigit() and int(value) >= 1:
            values.append(int(value))
        else:
            raise argparse.ArgumentTypeError(
                f"{value!r} in {text!r}: each value must be a whole number >= 1 or 'default'")
    return tuple(values)


def build_points(args: argparse.Namespace, settings: Settings, device: str) -> list[Point]:
    if device == "cpu" and args.utilization:
        raise TuneError("--utilization does not apply on a CPU: vLLM-CPU sizes its KV pool from "
                        "--kv-cache-gib (ERNIE_KV_CACHE_GIB). Sweep that instead.")
    if args.utilization and args.kv_cache_gib:
        raise TuneError("Sweep --utilization or --kv-cache-gib, not both: with a KV size "
                        "given, vLLM ignores the utilization.")
    memory = {}
    if args.kv_cache_gib:
        memory["kv_cache_gibs"] = args.kv_cache_gib
    elif device == "cpu":
        memory["kv_cache_gibs"] = (settings.cpu_kv_cache_gib,)
    else:
        memory["utilizations"] = args.utilization or (settings.gpu_memory_utilization,)
    points = sweep(args.max_model_len or (settings.max_model_len,), **memory,
                   max_num_seqs=args.max_num_seqs or (None,),
                   max_num_batched_tokens=args.max_num_batched_tokens or (None,))
    if len(points) > args.max_points:
        raise TuneError(f"The sweep has {len(points)} points, more than --max-points "
                        f"{args.max_points}; each one starts vLLM. Give fewer values or raise it.")
    return points


def engine_python(given: Optional[Path], settings: Settings) -> Path:
    """--engine-python (a path, or a command on PATH such as python3), else the engine env's."""
    python = given or provision.venv_python(ROOT / settings.engine_venv)
    found = python if python.exists() else shutil.which(str(python))
    if not found:
        raise TuneError(f"No engine Python at {python}: run ./scripts/up once, or pass "
                        "--engine-python with vLLM installed.")
    return Path(found)


def resolve_model(args: argparse.Namespace, settings: Settings, python: Path) -> str:
    """--model, else ERNIE_MODEL, resolved as `up` does (a cached hub id, a folder or the demo)."""
    choice = choose_model(settings.model_copy(update={"model": args.model or settings.model}))
    if choice.is_demo:
        provision.ensure_demo_model(Path(choice.path), python, ROOT)
    return choice.path


def add_parser(sub) -> None:
    tune = sub.add_parser(
        "tune", help="start vLLM at each point of a sweep, bench it, pick the best setting",
        description="Sweep engine settings (cartesian product of the values given), measure "
        "each with the same bench load, and choose the best goodput that still serves the "
        "max-model-len you need. Nothing is written unless --write-env.")
    sweep_args = tune.add_argument_group("sweep")
    sweep_args.add_argument("--utilization", type=float_list, help="GPU: e.g. 0.5,0.7,0.9")
    sweep_args.add_argument("--kv-cache-gib", type=float_list, help="KV pool sizes (CPU, or GPU)")
    sweep_args.add_argument("--max-model-len", type=bench.int_list, help="e.g. 2048,8192")
    sweep_args.add_argument("--max-num-seqs", type=batch_list,
                            help="e.g. default,128,256 (default: as in your settings, else vLLM's)")
    sweep_args.add_argument("--max-num-batched-tokens", type=batch_list, help="e.g. default,2048,8192")
    sweep_args.add_argument("--max-points", type=int, default=12, help="refuse larger sweeps (12)")
    tune.add_argument("--need-max-model-len", type=int,
                      help="longest request the choice must serve (default: `plan --from-usage` "
                           "advice when a usage log exists, else ERNIE_MAX_MODEL_LEN)")
    tune.add_argument("--model", help="checkpoint folder or hub id (default ERNIE_MODEL, as `up`)")
    tune.add_argument("--engine-python", type=Path,
                      help="Python with vLLM: a path or a command (default .venv-engine's)")
    tune.add_argument("--engine-args", default="",
                      help='more vLLM flags for every point, e.g. "--load-format dummy" or '
                           '--engine-args=--enforce-eager (one flag needs the =)')
    tune.add_argument("--device", choices=["cuda", "cpu"], help="default: this machine's")
    tune.add_argument("--point-timeout-s", type=float, default=900, help="start + bench of one point")
    tune.add_argument("--total-timeout-s", type=float, default=3 * 3600, help="the whole sweep")
    tune.add_argument("--out", type=Path,
                      help="results folder (default benchmarks/results/tune-<time>/)")
    tune.add_argument("--write-env", action="store_true", help="write the chosen ERNIE_* values to .env")
    tune.add_argument("--env-file", type=Path, default=Path(".env"), help="the file --write-env updates")
    bench.add_load_arguments(tune)
    tune.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    settings = load_settings()
    device = args.device or resolve_device(settings)
    try:
        if len(args.concurrency) != 1:
            raise TuneError("tune measures every point at one load: give one --concurrency.")
        points = build_points(args, settings, device)
        need, need_source = needed_max_model_len(args, settings, device)
        if max(p.max_model_len for p in points) < need:
            raise TuneError(f"No point of the sweep has a max-model-len of {need} or more, which "
                            f"you need ({need_source}): add one to --max-model-len.")
        python = engine_python(args.engine_python, settings)
        load = bench.config_from_args(args, settings, url="http://127.0.0.1")
        out_dir = args.out or RESULTS_DIR / time.strftime("tune-%Y%m%d-%H%M%S")
        out_dir.mkdir(parents=True, exist_ok=True)
        sweep_ = Sweep(settings, resolve_model(args, settings, python), device, python,
                       args.engine_args, load, out_dir, args.point_timeout_s,
                       time.monotonic() + args.total_timeout_s, points)
    except (TuneError, BenchError, FileNotFoundError, StepFailed) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    print(f"[tune] {len(points)} point(s) on {device}, model {sweep_.model}; the choice must serve "
          f"{need} tokens per request ({need_source}). Results in {out_dir}")
    previous = signal.signal(signal.SIGTERM, raise_shutdown)
    interrupted = False
    outcomes = [Outcome(p) for p in points]
    try:
        run_sweep(sweep_, outcomes)
    except (KeyboardInterrupt, Shutdown):
        interrupted = True
        print("\n[tune] interrupted: every engine it started is stopped")
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(render_table(outcomes))
    chosen, explanation = None, ""
    try:
        chosen = choose(outcomes, need)
        explanation = explain(chosen, outcomes, need, need_source)
    except TuneError as exc:
        explanation = str(exc)
    print("\n" + explanation)
    for path in save(outcomes, chosen, need, need_source, explanation, sweep_):
        print(f"wrote {path}")
    if chosen is None or interrupted:
        return 1
