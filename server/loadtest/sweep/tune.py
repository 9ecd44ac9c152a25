"""``ernie-chat tune``: measure engine settings instead of guessing them.

For every point of a sweep (``points``: memory x max-model-len x batch limits x any
engine setting given with ``--vary``, and named points such as ``--baseline``) it
starts vLLM with exactly the command ``up`` would use (``engine.start_vllm``, the one
function to swap for a stack that starts its engines its own way), reads from its log
the KV pool vLLM made and where its start-up time went, sends one unmeasured round of the load so that one-time costs (kernels
compiled at a new batch size) are paid, then runs the same bench load ``--repeats``
times, each with prompts of its own (seed + run number, so the prefix cache serves
none), and stops it.  Each figure is then a spread over the runs, and a difference
between points is a finding only when their ranges of runs do not overlap
(``stats``); the choice is the best goodput among those that serve the longest
request the user needs, a tie (noise) going to the cheaper point (``choice``).
With ``--users N`` each run is instead a steady state of N chat users and the choice
takes only points that kept every run within the users objective (``users_runs``).

Memory is ``--utilization`` on a GPU and ``--kv-cache-gib`` on a CPU, where
utilization does not size anything (engine_args).  Each engine is stopped when its
point is done: Ctrl-C, SIGTERM, a failed start and the time limits all leave no engine
behind.  tune.json is written after every point; a sweep stopped by its time limit
goes on with ``--resume``.  The chosen values go into ``.env`` only with ``--write-env``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

from server import env_file
from server.errors import LoadTestError
from server.loadtest.bench import report
from server.loadtest.bench.run import run_bench
from server.loadtest.lib.config import BenchConfig, Load
from server.loadtest.lib.load_args import add_load_arguments, config_from_args, int_list, results_folder
from server.loadtest.sweep import results as tune_results
from server.loadtest.sweep.choice import Outcome, TuneError, choose, explain, render_table
from server.loadtest.sweep.engine import (
    PointFailed,
    PointStart,
    RunningEngine,
    StartEngine,
    failure_reason,
    start_vllm,
)
from server.loadtest.sweep.points import (
    batch_list,
    build_points,
    float_list,
    named_point,
    pairs,
    with_overrides,
)
from server.loadtest.sweep.users_runs import UsersLoad, run_users
from server.loadtest.users.capacity import Objective
from server.paths import ROOT
from server.plan import kv_planner as kp
from server.plan import stream_interval
from server.plan.device import resolve_device
from server.plan.model_config import load_shape
from server.progress import StepFailed
from server.settings import Settings, load_settings
from server.stack import engine_env, provision
from server.stack.model_source import choose_model
from server.stack.processes import free_port
from server.stack.supervisor import Shutdown, raise_shutdown
from server.stack.vllm_log import parse_kv_report, read_tail, render_phases, startup_phases

EXIT_RESUMABLE = 3              # the time limit left points to run


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
    repeats: int = 3
    settle: int = 0  # requests of the unmeasured round before the runs
    users: Optional[UsersLoad] = None  # each run a steady state of chat users, not the bench load
    # What `up` gives an engine whose point sets no stream_interval (an older GPU vLLM's 8)
    interval: stream_interval.IntervalChoice = stream_interval.IntervalChoice(None, None)
    start_engine: StartEngine = start_vllm
    outcomes: list[Outcome] = field(default_factory=list)

    def header(self) -> dict:
        """What makes two sweeps the same sweep: a resumed one must match it."""
        return {"model": self.model, "device": self.device, "engine_python": str(self.python),
                "engine_args": self.engine_args, "load": self.load.as_dict(),
                "repeats": self.repeats, "settle_requests": self.settle,
                "users": self.users.as_dict() if self.users else None,
                "auto_stream_interval": self.interval.interval,
                "labels": [o.point.label() for o in self.outcomes]}


def point_settings(sweep_: Sweep, outcome: Outcome) -> Settings:
    """The point's settings as `up` would run them, on a port of its own."""
    return sweep_.interval.applied(with_overrides(sweep_.settings, {
        **outcome.point.overrides(), "engine_host": "127.0.0.1", "engine_port": free_port(),
        "extra_engine_args": f"{sweep_.settings.extra_engine_args} {sweep_.engine_args}".strip()}))


def run_point(n: int, sweep_: Sweep, outcome: Outcome) -> None:
    """Start the engine for ``outcome.point``, measure it, stop it; fills ``outcome``."""
    settings = point_settings(sweep_, outcome)
    outcome.port, outcome.runs, outcome.missed, outcome.reason = settings.engine_port, [], [], ""
    deadline = min(time.monotonic() + sweep_.point_timeout_s, sweep_.deadline)
    print(f"[tune] point {n}/{len(sweep_.outcomes)}: {outcome.point.label()}")
    start = PointStart(settings, sweep_.model, sweep_.device, sweep_.python,
                       sweep_.out_dir / f"point-{n:02d}-engine.log", f"tune {n}/{len(sweep_.outcomes)}",
                       deadline - time.monotonic())
    try:
        with sweep_.start_engine(start) as engine:
            outcome.pid, outcome.startup_s = engine.pid, engine.startup_s
            outcome.served_max_model_len = int(engine.served.get("max_model_len")
                                               or outcome.point.max_model_len)
            lines = read_tail(engine.log)
            kv = parse_kv_report(lines)
            outcome.kv_tokens, outcome.kv_memory_gib = kv.kv_tokens, kv.kv_memory_gib
            outcome.kv_concurrency = kv.max_concurrency
            phases = startup_phases(lines)
            outcome.startup_phases = [asdict(p) for p in phases]
            print(render_phases(phases, engine.startup_s))
            measure(n, sweep_, outcome, engine, deadline)
    except PointFailed as exc:
        # A start the sweep's time limit cut short is no failure: --resume runs it again.
        cut = exc.timed_out and deadline >= sweep_.deadline
        outcome.status, outcome.reason, outcome.pid = "cut" if cut else "failed", exc.reason, exc.pid
    except LoadTestError as exc:
        outcome.status, outcome.reason = "failed", str(exc)


def measure(n: int, sweep_: Sweep, outcome: Outcome, engine: RunningEngine, deadline: float) -> None:
    """The unmeasured round, then the runs, each with prompts of its own."""
    load = sweep_.load
    cfg = replace(load, url=engine.url, model=engine.served.get("id"), api_key=engine.api_key)

    def bounded(seed: int, prompts: int) -> tuple[BenchConfig, bool]:
        """The run's config, and whether the time left, not the load, bounds it."""
        left = max(1.0, deadline - time.monotonic())
        return replace(cfg, load=replace(load.load, seed=seed, num_prompts=prompts),
                       max_seconds=min(load.max_seconds, left),
                       request_timeout_s=min(load.request_timeout_s, left)), left < load.max_seconds

    if sweep_.settle:
        print(f"[tune] settling: {sweep_.settle} unmeasured requests")
        asyncio.run(run_bench(bounded(load.load.seed + sweep_.repeats, sweep_.settle)[0]))
    outcome.status = "measured"
    if sweep_.users:
        return measure_users(n, sweep_, outcome, engine, cfg, deadline)
    for r in range(sweep_.repeats):
        run, bounded_by_time = bounded(load.load.seed + r, load.load.num_prompts)
        result = asyncio.run(run_bench(run))
        report.save(result, sweep_.out_dir / f"point-{n:02d}" / f"run-{r + 1}", plots=False)
        summary = result.levels[0].summary if result.levels else None
        if not engine.alive():
            outcome.status, outcome.reason = "failed", f"vLLM exited under load: {failure_reason(engine.log)}"
            return
        if summary is None or (bounded_by_time and summary.completed < load.load.num_prompts):
            return out_of_time(sweep_, outcome, deadline)
        outcome.runs.append(summary)


def out_of_time(sweep_: Sweep, outcome: Outcome, deadline: float) -> None:
    """The point's runs stopped by a time limit: the sweep's (--resume runs the point again)
    or the point's own (--point-timeout-s: a rerun would not fit either)."""
    by_sweep = deadline >= sweep_.deadline
    outcome.status = "cut" if by_sweep else "failed"
    outcome.reason = (f"{len(outcome.runs)} of {sweep_.repeats} runs done when the time limit came"
                      + ("; --resume runs this point again" if by_sweep else " (--point-timeout-s)"))


def measure_users(n: int, sweep_: Sweep, outcome: Outcome, engine: RunningEngine, cfg: BenchConfig,
                  deadline: float) -> None:
    """The runs of ``tune --users``: a run starts only where its send window fits the time left
    (the replies in flight at its end are waited for within the request timeout)."""
    users = sweep_.users
    for r in range(sweep_.repeats):
        if deadline - time.monotonic() < users.run_s:
            return out_of_time(sweep_, outcome, deadline)
        label = f"tune {n}/{len(sweep_.outcomes)} run {r + 1}"
        summary, missed = run_users(users, cfg, sweep_.settings.system_prompt, cfg.load.seed + r, label,
                                    sweep_.out_dir / f"point-{n:02d}" / f"run-{r + 1}")
        if not engine.alive():
            outcome.status, outcome.reason = "failed", f"vLLM exited under load: {failure_reason(engine.log)}"
            return
        print(f"[tune] run {r + 1}: " + (f"missed the objective: {missed}" if missed else
                                         "within the objective"))
        outcome.runs.append(summary)
        outcome.missed.append(missed)


def run_sweep(sweep_: Sweep) -> None:
    """Run every point not yet done, in place, so an interrupted sweep keeps what it measured.

    A point starts only if the sweep has the time the longest point so far took."""
    longest = 0.0
    for n, outcome in enumerate(sweep_.outcomes, 1):
        if outcome.status not in tune_results.RESUMABLE:
            continue
        if time.monotonic() + longest >= sweep_.deadline:
            outcome.status, outcome.reason = "not run", ("the sweep's time limit (--total-timeout-s) "
                                                         "came first; --resume runs it")
            continue
        started = time.monotonic()
        run_point(n, sweep_, outcome)
        longest = max(longest, time.monotonic() - started)
        tune_results.write(sweep_.out_dir, sweep_.header(), sweep_.outcomes)


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


def engine_python(given: Optional[Path], settings: Settings) -> Path:
    """--engine-python (a path, or a command on PATH such as python3), else the engine env's."""
    python = given or engine_env.venv_python(ROOT / settings.engine_venv)
    found = python if python.exists() else shutil.which(str(python))
    if not found:
        raise TuneError(f"No engine Python at {python}: run ./scripts/up once, or pass "
                        "--engine-python with vLLM installed.")
    return Path(found)


def resolve_model(args: argparse.Namespace, settings: Settings, python: Path) -> str:
    """--model, else ERNIE_MODEL, resolved as `up` does (a cached hub id, a folder or the demo)."""
    choice = choose_model(settings.model_copy(update={"model": args.model or settings.model}))
    provision.ensure_model(choice, python, ROOT)
    return choice.path


def add_parser(sub) -> None:
    tune = sub.add_parser(
        "tune", help="start vLLM at each point of a sweep, bench it repeatedly, pick the best setting",
        description="Sweep engine settings (cartesian product of the values given, plus named "
        "points), measure each with the same bench load --repeats times, and choose the best "
        "goodput that still serves the max-model-len you need; a difference within the spread "
        "of the runs is noise, not a finding. Nothing is written unless --write-env.")
    sweep_args = tune.add_argument_group("sweep")
    sweep_args.add_argument("--utilization", type=float_list, help="GPU: e.g. 0.5,0.7,0.9")
    sweep_args.add_argument("--kv-cache-gib", type=float_list, help="KV pool sizes (CPU, or GPU)")
    sweep_args.add_argument("--max-model-len", type=int_list, help="e.g. 2048,8192")
    sweep_args.add_argument("--max-num-seqs", type=batch_list,
                            help="e.g. default,128,256 (default: vLLM's own choice)")
    sweep_args.add_argument("--max-num-batched-tokens", type=batch_list, help="e.g. default,2048,8192")
    sweep_args.add_argument("--vary", type=pairs, action="append", metavar="SETTING=V1,V2",
                            help="any engine setting of .env.example (without ERNIE_), e.g. "
                                 "async_scheduling=on,off or stream_interval=default,4; repeatable")
    sweep_args.add_argument("--baseline", action="store_true",
                            help="add a point with vLLM's own defaults (no flag it does not need)")
    sweep_args.add_argument("--point", type=named_point, action="append", metavar='"NAME: S=V ..."',
                            help='add a named point, e.g. "seed 8192: max_model_len=8192 '
                                 'gpu_memory_utilization=0.82"; repeatable')
    sweep_args.add_argument("--max-points", type=int, default=12, help="refuse larger sweeps (12)")
    runs = tune.add_argument_group("runs")
    runs.add_argument("--repeats", type=int, default=3,
                      help="measured runs per point, each with prompts of its own (default 3; "
                           "3 or more tell findings from noise)")
    runs.add_argument("--settle-requests", type=int,
                      help="unmeasured requests before the runs (default: one round, --concurrency)")
    runs.add_argument("--resume", action="store_true",
                      help="go on with the sweep in --out: run only the points its tune.json lacks")
    users = tune.add_argument_group(
        "users instead of the bench load (--users): each run is a steady state of chat users "
        "straight to the point's engine, as a step of `capacity --through engine`; the choice "
        "takes only points whose every run kept the objective")
    users.add_argument("--users", type=int, help="chat users of every run (e.g. 3000)")
    users.add_argument("--think-s", type=float, default=3.0, help="mean pause after a reply (default 3)")
    users.add_argument("--ramp-s", type=float, default=10.0, help="the users arrive over this long (default 10)")
    users.add_argument("--step-s", type=float, default=60.0,
                       help="seconds of steady state measured after the ramp (default 60)")
    users.add_argument("--objective-ttft-p99-ms", type=float, default=1000.0)
    users.add_argument("--objective-tokens-per-s", type=float, default=20.0,
                       help="per-user decode rate that nine users in ten must see (default 20)")
    tune.add_argument("--plot-only", type=Path, metavar="TUNE.json",
                      help="print the table and draw tune.png of a saved sweep; starts nothing")
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
    tune.add_argument("--point-timeout-s", type=float, default=900, help="start + runs of one point")
    tune.add_argument("--total-timeout-s", type=float, default=3 * 3600, help="the whole sweep")
    tune.add_argument("--out", type=Path,
                      help="results folder (default benchmarks/results/tune-<time>/)")
    tune.add_argument("--write-env", action="store_true", help="write the chosen ERNIE_* values to .env")
    tune.add_argument("--env-file", type=Path, default=Path(".env"), help="the file --write-env updates")
    add_load_arguments(tune)
    tune.set_defaults(func=cmd_tune)


def prepare(args: argparse.Namespace, settings: Settings, device: str) -> tuple[Sweep, int, str]:
    """The sweep the arguments ask for, checked before any engine starts."""
    users = users_load(args)
    if len(args.concurrency) != 1:
        raise TuneError("tune measures every point at one load: give one --concurrency.")
    if args.repeats < 1 or (args.settle_requests or 0) < 0:
        raise TuneError("--repeats must be at least 1 and --settle-requests at least 0.")
    if args.resume and not args.out:
        raise TuneError("--resume goes on with the sweep in --out: give its folder.")
    python = engine_python(args.engine_python, settings)
    model = resolve_model(args, settings, python)
    model_max_len = load_shape(model)[0].max_position_embeddings if args.baseline else None
    points = build_points(args, settings, device, model_max_len)
    need, need_source = needed_max_model_len(args, settings, device)
    if max(p.max_model_len for p in points) < need:
        raise TuneError(f"No point of the sweep has a max-model-len of {need} or more, which "
                        f"you need ({need_source}): add one to --max-model-len.")
    load = config_from_args(args, settings, url="http://127.0.0.1")
    out_dir = results_folder(args.out, "tune-")
    out_dir.mkdir(parents=True, exist_ok=True)
    # The users' own ramp is unmeasured: it pays what a first round would.
    settle = args.settle_requests if args.settle_requests is not None else 0 if users else args.concurrency[0]
    sweep_ = Sweep(settings, model, device, python, args.engine_args, load, out_dir,
                   args.point_timeout_s, time.monotonic() + args.total_timeout_s, args.repeats,
                   settle, users, stream_interval.choose(device, python),
                   outcomes=[Outcome(p) for p in points])
    if sweep_.interval.reason:
        print(f"[tune] {sweep_.interval.reason}; as `up`, for every point that sets no stream_interval")
    if args.resume:
        done = tune_results.take_done(out_dir, sweep_.header(), sweep_.outcomes, sweep_.repeats)
        print(f"[tune] resuming: {done} of {len(points)} point(s) already done")
    return sweep_, need, need_source


def users_load(args: argparse.Namespace) -> Optional[UsersLoad]:
    """--users' load, checked; the bench's own checks then count the users as its concurrency
    (no more client processes than users)."""
    if args.users is None:
        return None
    if getattr(args, "concurrency_given", False):
        raise TuneError("--concurrency is the bench load's: with --users the users are the load.")
    objective = Objective(args.objective_ttft_p99_ms, args.objective_tokens_per_s)
    if objective.ttft_p99_ms <= 0 or objective.tokens_per_s < 0 or args.step_s <= 0:
        raise TuneError("--objective-ttft-p99-ms and --step-s must be positive, "
                        "--objective-tokens-per-s not negative.")
    load = UsersLoad(args.users, objective, args.think_s, args.ramp_s, args.step_s, args.processes)
    load.model(args.seed, args.request_timeout_s).check()
    args.concurrency = (args.users,)
    return load


def cmd_tune(args: argparse.Namespace) -> int:
    if args.plot_only:
        for path in tune_results.show(args.plot_only):
            print(f"wrote {path}")
        return 0
    settings = load_settings()
    device = args.device or resolve_device(settings)
    try:
        sweep_, need, need_source = prepare(args, settings, device)
    except (TuneError, LoadTestError, FileNotFoundError, StepFailed) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    load: Load = sweep_.load.load
    each = sweep_.users.describe() if sweep_.users else f"{load.num_prompts} requests"
    print(f"[tune] {len(sweep_.outcomes)} point(s) on {device}, model {sweep_.model}, "
          f"{sweep_.repeats} run(s) of {each} each; the choice must serve "
          f"{need} tokens per request ({need_source}). Results in {sweep_.out_dir}")
    previous = signal.signal(signal.SIGTERM, raise_shutdown)
    interrupted = False
    try:
        run_sweep(sweep_)
    except (KeyboardInterrupt, Shutdown):
        interrupted = True
        print("\n[tune] interrupted: every engine it started is stopped")
    finally:
        signal.signal(signal.SIGTERM, previous)
    chosen, explanation = None, ""
    try:
        chosen = choose(sweep_.outcomes, need)
        explanation = explain(chosen, sweep_.outcomes, need, need_source)
        if sweep_.users:
            explanation = f"Every run: {sweep_.users.describe()}. {explanation}"
    except TuneError as exc:
        explanation = str(exc)
    print(render_table(sweep_.outcomes, chosen))
    print("\n" + explanation)
    for path in tune_results.write_final(sweep_.out_dir, sweep_.header(), sweep_.outcomes, chosen,
                                         need, need_source, explanation):
        print(f"wrote {path}")
    left = [o for o in sweep_.outcomes if o.status in tune_results.RESUMABLE]
    if left and not interrupted:
        print(f"[tune] {len(left)} point(s) left for the time limit: the same command with "
              "--resume goes on")
        return EXIT_RESUMABLE
    if chosen is None or interrupted:
        return 1
    if args.write_env:
        env_file.write_env(args.env_file, chosen.point.env_values())
        print(f"wrote the chosen settings to {args.env_file}")
    return 0
