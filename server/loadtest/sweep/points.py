"""What tune sweeps: its points, from the command line, checked before any engine starts.

Any engine setting of server/settings/ can be a dimension (``--vary NAME=V1,V2``);
the memory and batch settings also have flags of their own.  A point is settings
overrides, turned into vLLM's command by the same engine_args.engine_command ``up``
uses, so a dimension that does not change that command (an app setting, a GPU-only
setting on a CPU) is refused: every value would measure the same engine.  Besides the
cartesian product, whole points can be named: ``--baseline`` (vLLM's own defaults)
and ``--point "NAME: setting=value ..."`` (a profile, e.g. one of plan's).
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any, Optional

from pydantic import ValidationError

from server.loadtest.sweep.choice import PROCESS_SETTINGS, Point, TuneError, sweep
from server.plan.preflight import device_problems
from server.settings import Settings, env_name
from server.stack.engine_args import engine_command

# Settings tune decides itself, or that say where things are rather than how vLLM runs.
TUNE_OWNS = {"model": "--model", "device": "--device", "extra_engine_args": "--engine-args",
             "engine_host": "", "engine_port": "", "engine_url": "", "api_key": "",
             "engine_venv": "--engine-python", "log_file": "", "served_model_name": ""}
# The flags that sweep a setting of their own (argparse dest -> setting).
FLAG_SETTINGS = {"max_model_len": "max_model_len", "utilization": "gpu_memory_utilization",
                 "kv_cache_gib": "kv_cache_gib", "max_num_seqs": "max_num_seqs",
                 "max_num_batched_tokens": "max_num_batched_tokens"}
VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization when none is given
BASELINE = "vLLM defaults"


def setting_name(text: str) -> str:
    """A setting's field name from what a person types: max-num-seqs, ERNIE_MAX_NUM_SEQS..."""
    name = text.strip().lower().replace("-", "_").removeprefix("ernie_")
    if name in Settings.model_fields:
        return name
    close = difflib.get_close_matches(name, Settings.model_fields, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise TuneError(f"{text!r} is not a setting{hint}; every ERNIE_* setting of .env.example can "
                    "be swept, written without the ERNIE_ prefix.")


def with_overrides(settings: Settings, overrides: dict, what: str = "") -> Settings:
    """``settings`` with ``overrides``, validated as `up` would validate them."""
    try:
        return Settings.model_validate({**settings.model_dump(), **overrides})
    except ValidationError as exc:
        problems = "; ".join(
            f"{env_name(str(e['loc'][0])) if e['loc'] else ''} {e['msg'].removeprefix('Value error, ')}"
            .strip() for e in exc.errors())
        raise TuneError(f"{what or 'This point'} is not a valid setting: {problems}") from None


def typed(settings: Settings, name: str, text: str) -> Any:
    """One value as the setting takes it; ``default`` is the setting's default (for the
    batch limits and the one-fast-stream settings: vLLM's own choice, no flag)."""
    if name in TUNE_OWNS:
        flag = TUNE_OWNS[name]
        raise TuneError(f"tune sets {name} itself" + (f": use {flag}" if flag else "") + ".")
    if text.strip() == "default":
        return Settings.model_fields[name].default
    return getattr(with_overrides(settings, {name: text.strip()}, f"{name}={text.strip()}"), name)


def pairs(text: str) -> tuple[str, str]:
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=VALUE[,VALUE...], e.g. "
                                         "async_scheduling=on,off")
    return name.strip(), values


def named_point(text: str) -> tuple[str, list[tuple[str, str]]]:
    """``--point "NAME: setting=value setting=value"``."""
    name, sep, rest = text.partition(":")
    settings = [pairs(item) for item in rest.split()]
    if not sep or not name.strip() or not settings or any("," in v for _, v in settings):
        raise argparse.ArgumentTypeError(f"{text!r}: write \"NAME: setting=value ...\" (one value "
                                         "each), e.g. \"seed 8192: max_model_len=8192 "
                                         "gpu_memory_utilization=0.82\"")
    return name.strip(), settings


def command_of(settings: Settings, device: str) -> tuple[str, ...]:
    """The engine's command line and the variables it gets (some settings reach vLLM only so)."""
    command = engine_command(settings, "MODEL", device, "python")
    return tuple(command.argv) + tuple(f"{k}={v}" for k, v in sorted(command.env.items()))


def reaches_vllm(settings: Settings, device: str, name: str, values: tuple) -> None:
    """Refuse a dimension whose values all give the command the settings already give.

    Settings that start more processes (tune_choice.PROCESS_SETTINGS) may reach the engine
    through the stack's own starter rather than vLLM's command: those pass."""
    if name in PROCESS_SETTINGS:
        return
    commands = {command_of(with_overrides(settings, {name: v}, f"{name}={v}"), device) for v in values}
    if commands == {command_of(settings, device)}:
        raise TuneError(f"--vary {name}: every value gives the vLLM command your settings already "
                        f"give on {device} ({name} does not reach vLLM there, or has this value "
                        "already), so the points would all measure one engine.")


def dimensions(args: argparse.Namespace, settings: Settings, device: str) -> dict[str, tuple]:
    """Every swept setting and its values, the flags' first, then --vary's in order."""
    dims = {FLAG_SETTINGS[flag]: tuple(getattr(args, flag)) for flag in FLAG_SETTINGS
            if getattr(args, flag)}
    for raw, text in args.vary or ():
        name = setting_name(raw)
        if name in dims:
            raise TuneError(f"{name} is swept twice: give its values once.")
        dims[name] = tuple(typed(settings, name, v) for v in text.split(","))
        if len(set(dims[name])) != len(dims[name]):
            raise TuneError(f"--vary {raw}={text}: a value is given twice.")
        reaches_vllm(settings, device, name, dims[name])
    if device == "cpu" and "gpu_memory_utilization" in dims:
        raise TuneError("--utilization does not apply on a CPU: vLLM-CPU sizes its KV pool from "
                        "--kv-cache-gib (ERNIE_KV_CACHE_GIB). Sweep that instead.")
    if "gpu_memory_utilization" in dims and "kv_cache_gib" in dims:
        raise TuneError("Sweep --utilization or --kv-cache-gib, not both: with a KV size "
                        "given, vLLM ignores the utilization.")
    return dims


def memory_of(settings: Settings, device: str) -> dict:
    """The pool every point gets unless it sweeps one: explicit, so each point says it."""
    if device == "cpu":
        return {"kv_cache_gib": settings.cpu_kv_cache_gib}
    if settings.kv_cache_gib is not None:
        return {"kv_cache_gib": settings.kv_cache_gib}
    return {"gpu_memory_utilization": settings.gpu_memory_utilization}


def baseline(settings: Settings, device: str, model_max_len: int) -> Point:
    """vLLM's own defaults: every engine setting that reaches its command at its default
    (no flag), the model's whole window, vLLM's default memory (on a CPU, where vLLM
    would take most of the RAM, the pool of the settings), and one server with one API
    server process, not the ones `up` would start on this machine."""
    values: dict[str, Any] = {"max_model_len": model_max_len, "api_servers": 1, "engine_copies": 1}
    values.update({"kv_cache_gib": settings.cpu_kv_cache_gib} if device == "cpu" else
                  {"gpu_memory_utilization": VLLM_DEFAULT_UTILIZATION, "kv_cache_gib": None})
    base = with_overrides(settings, values)
    for name, field in Settings.model_fields.items():
        if name in TUNE_OWNS or name in values or getattr(base, name) == field.default:
            continue
        reset = with_overrides(base, {name: field.default}, f"{name}=default")
        if command_of(reset, device) != command_of(base, device):
            values[name] = field.default
    return Point.of(BASELINE, **values)


def build_points(args: argparse.Namespace, settings: Settings, device: str,
                 model_max_len: Optional[int] = None) -> list[Point]:
    """The named points (--baseline, --point), then the sweep; each checked as `up` would."""
    dims = dimensions(args, settings, device)
    as_set = {"max_model_len": settings.max_model_len, **memory_of(settings, device)}
    swept_memory = "gpu_memory_utilization" in dims or "kv_cache_gib" in dims
    fixed = {"max_model_len": settings.max_model_len} if swept_memory else as_set
    named = [baseline(settings, device, model_max_len or settings.max_model_len)] if args.baseline else []
    for name, items in args.point or ():
        values = {setting_name(k): typed(settings, setting_name(k), v) for k, v in items}
        named.append(Point.of(name, **{**as_set, **values}))
    points = named + (sweep(dims, fixed) if dims or not named else [])
    if len(points) > args.max_points:
        raise TuneError(f"The sweep has {len(points)} points, more than --max-points "
                        f"{args.max_points}; each one starts vLLM. Give fewer values or raise it.")
    for point in points:
        checked = with_overrides(settings, point.overrides(), point.label())
        for problem in device_problems(checked, device):
            raise TuneError(f"The point \"{point.label()}\" cannot run on a {device}: {problem}")
    return points


# --- argument types ------------------------------------------------------------------

def float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def batch_list(text: str) -> tuple[Optional[int], ...]:
    """Integers, and ``default`` for vLLM's own choice (the setting unset).

    vLLM sizes its batch limits by the device: on an H200 no cap tried for this model beat
    its default beyond the noise (docs/performance.md, "Memory settings"), so a sweep should be
    able to include it.
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
