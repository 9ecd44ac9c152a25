"""The load as the command line gives it, for every tool that sends one: the flags that
describe it (``bench``'s, which ``tune`` runs at every point and bench's app modes on the
app), the :class:`BenchConfig` they make, and where a run's files go by default.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Optional

from server.engine_key import EngineKey, engine_key, own_engine
from server.errors import LoadTestError
from server.loadtest.lib.client_processes import MAX_PROCESSES
from server.loadtest.lib.config import BenchConfig, BenchError, Load
from server.loadtest.lib.stats import Slo
from server.loadtest.lib.target import check_target
from server.paths import RESULTS_DIR
from server.settings import api_root
from server.settings.model_list import ServedModel


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("every value must be at least 1")
    return values


class Given(argparse.Action):
    """Store the value and note that it was given (``args.<dest>_given``): --concurrency
    means one thing by default and another with --request-rate."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def positive_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (or inf)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive (or inf)")
    return value


def add_load_arguments(parser: argparse.ArgumentParser, open_loop: bool = False) -> None:
    """The flags that describe the load; `tune` runs the same load at every point. With
    ``open_loop`` (bench), also --request-rate and --burstiness."""
    load = parser.add_argument_group("load")
    load.add_argument("--concurrency", type=int_list, default=(4,), action=Given,
                      help="requests in flight; a comma list sweeps (1,4,16). Default 4; with "
                           "--request-rate the most in flight (vLLM's --max-concurrency), "
                           "default no limit")
    if open_loop:
        load.add_argument("--request-rate", type=positive_rate, default=math.inf, metavar="R",
                          help="open loop: requests arrive at R per second whatever the server's "
                               "pace, as `vllm bench serve --request-rate` (default inf: the "
                               "closed loop of --concurrency)")
        load.add_argument("--burstiness", type=positive_rate, default=1.0, metavar="B",
                          help="with --request-rate: the gamma shape of the gaps between "
                               "arrivals, as vLLM's (1: Poisson, default; below 1 burstier; "
                               "inf: evenly spaced)")
    load.add_argument("--num-prompts", type=int, default=Load.num_prompts,
                      help=f"requests per concurrency level (default {Load.num_prompts})")
    load.add_argument("--input-len", type=int, default=Load.input_len,
                      help=f"prompt tokens (default {Load.input_len})")
    load.add_argument("--output-len", type=int, default=Load.output_len,
                      help=f"reply tokens, max_tokens (default {Load.output_len})")
    load.add_argument("--range-ratio", type=float, default=0.0,
                      help="draw lengths uniformly in [len x (1-r), len x (1+r)], as vLLM")
    load.add_argument("--from-usage", nargs="?", const="", metavar="FILE",
                      help="draw (prompt, reply) lengths from recorded chats (default ERNIE_USAGE_LOG)")
    load.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                      help="let replies end at EOS (default: send ignore_eos so every reply is "
                           "--output-len long)")
    load.add_argument("--temperature", type=float, help="default: the server's")
    load.add_argument("--top-p", type=float,
                      help="default: the server's. The chat sends ERNIE_TOP_P (0.9), which makes "
                           "vLLM run a top-p sampling kernel every step: give --temperature 0.7 "
                           "--top-p 0.9 to load vLLM as the chat does")
    load.add_argument("--slo-ttft-ms", type=float, help="goodput counts requests with TTFT at most this")
    load.add_argument("--slo-tpot-ms", type=float, help="goodput counts requests with TPOT at most this")
    load.add_argument("--max-seconds", type=float, default=600.0,
                      help="stop the load after this long; requests still running are cancelled "
                           "(default 600)")
    load.add_argument("--request-timeout-s", type=float, default=300.0,
                      help="give up on a request after this long without a chunk (default 300)")
    load.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default 1)")
    load.add_argument("--processes", type=int, default=1,
                      help="client processes that share each level's requests and send at once "
                           "(default 1; one process reading a thousand streams measures itself: "
                           "give 4 for 1,000 in flight, as qa-load --processes)")
    load.add_argument("--seed", type=int, default=0)


def config_from_args(args: argparse.Namespace, settings, url: str, model: Optional[str] = None,
                     key: Optional[EngineKey] = None) -> BenchConfig:
    from_usage = None
    if args.from_usage is not None:
        from_usage = Path(args.from_usage) if args.from_usage else settings.usage_log
    if args.num_prompts < 1 or args.input_len < 1 or args.output_len < 1 or args.max_seconds <= 0:
        raise BenchError("--num-prompts, --input-len, --output-len and --max-seconds must be positive.")
    if not 0 <= args.range_ratio < 1:
        raise BenchError("--range-ratio must be in [0, 1).")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise BenchError(f"--top-p must be in (0, 1] (got {args.top_p}).")
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise BenchError(f"--processes must be between 1 and {MAX_PROCESSES} (got {args.processes}).")
    rate, burstiness = getattr(args, "request_rate", math.inf), getattr(args, "burstiness", 1.0)
    uncapped = rate != math.inf and not getattr(args, "concurrency_given", False)
    concurrencies = (args.num_prompts,) if uncapped else args.concurrency
    if args.processes > min(concurrencies):
        raise BenchError(f"--processes {args.processes} is more than --concurrency {min(concurrencies)}: "
                         "each client process needs at least one request in flight.")
    return BenchConfig(
        url=api_root(url), api_key=key.value if key else None,
        api_key_from=key.source if key else "", model=model,
        concurrencies=concurrencies,
        load=Load(args.num_prompts, args.input_len, args.output_len, args.range_ratio,
                  from_usage, args.seed),
        ignore_eos=args.ignore_eos, max_seconds=args.max_seconds,
        request_timeout_s=args.request_timeout_s, warmup=max(0, args.warmup),
        temperature=args.temperature, top_p=args.top_p, slo=Slo(args.slo_ttft_ms, args.slo_tpot_ms),
        processes=args.processes, request_rate=rate, burstiness=burstiness, uncapped=uncapped)


def served_model(settings, name: Optional[str]) -> ServedModel:
    """The model a load test names with --model: its served name or its name in the settings
    (ERNIE_MODELS, or ERNIE_MODEL alone); without one, the first."""
    models = settings.served_models
    found = next((m for m in models if name in (m.served_name, m.name)), None) if name else models[0]
    if found is None:
        raise LoadTestError(f"--model {name!r} is not served here; the served names are "
                            f"{', '.join(m.served_name for m in models)}, from ERNIE_MODELS (or "
                            "ERNIE_MODEL alone) as read from the environment and .env: put "
                            "ERNIE_MODELS in .env so that `up` and the CLI read the same models")
    return found


def chat_profile(settings, name: Optional[str]) -> str:
    """The chat profile that picks the model ``name`` in the app: its served name where the app
    offers several models (ERNIE_MODELS), else none; an unknown name is refused either way."""
    model = served_model(settings, name)
    return model.served_name if name and settings.models else ""


def add_model_argument(parser: argparse.ArgumentParser, how: str) -> None:
    parser.add_argument("--model", help="the model of the settings to load, by its served name or "
                        f"its name in ERNIE_MODELS (default: the first); {how}")


def engine_config(args: argparse.Namespace):
    """The settings and the load for the server a command names (--url, default the engine of
    the settings' model --model), checked to be one this machine may load."""
    from server.settings import load_settings
    settings = load_settings()
    if args.url:  # another server: --model is sent as it is
        url, model = args.url, args.model
    else:
        served = served_model(settings, args.model)
        url, model = served.base_url, served.served_name if args.model else None
    # An engine `up` starts here is on this machine, whatever address it listens on.
    check_target(url, explicit=bool(args.url) or own_engine(settings, url))
    return settings, config_from_args(args, settings, url, model, engine_key(settings, url, args.api_key))


def results_folder(out: Optional[Path], prefix: str = "") -> Path:
    """--out, or a new folder named by the time under benchmarks/results/."""
    return out or RESULTS_DIR / time.strftime(f"{prefix}%Y%m%d-%H%M%S")
