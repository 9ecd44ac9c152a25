"""``ernie-chat plan``: the KV-cache plan for a model on a device, as a table or JSON.

Gathers the inputs (model config, device memory, settings and flags), asks
:mod:`server.plan.kv_planner` and prints.  The figures are the ones vLLM's log will
show; the README's "Choosing the memory settings" is made from this output.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Optional

from server.errors import BadInput
from server.plan import kv_planner as kp
from server.plan import engine_copies, models, preflight
from server.plan.device import DeviceMemory, read_memory, resolve_device
from server.plan.model_config import load_shape
from server.settings import Settings
from server.settings.model_list import parse_models

GIB = kp.GIB
WINDOWS = [2048, 4096, 8192, 32768, 131072]


def device_memory(args: argparse.Namespace, settings: Settings) -> DeviceMemory:
    """Given sizes win over measurement, so a plan can be made for a GPU you do not have."""
    if args.gpu_memory_gib:
        total = int(args.gpu_memory_gib * GIB)
        return DeviceMemory("cuda", f"GPU with {args.gpu_memory_gib:g} GiB (given)", total, total)
    device = args.device or resolve_device(settings)
    return read_memory(device)


def with_flags(args: argparse.Namespace, settings: Settings) -> Settings:
    """The settings with the command's flags in their place; --model alone plans one model."""
    models = args.models if args.models is not None else "" if args.model else None
    overrides = {k: v for k, v in {
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_gib": args.kv_cache_gib,
        "max_model_len": args.max_model_len,
        "kv_cache_dtype": args.kv_cache_dtype,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "enforce_eager": args.enforce_eager or None,
        "engine_copies": args.engine_copies,
        "models": models,
        "models_at_once": args.at_once,
    }.items() if v is not None}
    return settings.model_copy(update=overrides)


def build(args: argparse.Namespace, settings: Settings) -> dict:
    settings = with_flags(args, settings)
    if settings.models:
        return build_models(args, settings)
    if args.at_once is not None:
        raise BadInput("--at-once is how many of several models run together: give them with "
                       "--models (or ERNIE_MODELS), not --model.")
    shape, source = load_shape(args.model or settings.model)
    memory = device_memory(args, settings)
    copies, copies_reason = settings.copies_per_gpu, None
    if engine_copies.chooses_copies(settings) and memory.kind == "cuda":  # as `up` would on this machine
        choice = engine_copies.auto_copies(memory.kind, os.cpu_count() or 1, shape.weights,
                                           memory.total_bytes)
        copies, copies_reason = choice.copies, choice.reason
    # Every figure below is one copy's: its share of the GPU (the setting is for all of them).
    settings = preflight.per_copy_settings(settings, copies)
    plan = preflight.plan_for(settings, shape, memory)
    block = plan.block_size
    result = {
        **plan.as_dict(),  # first: "device" below replaces its bare device kind
        "model": shape.name, "config_source": source,
        "shape": {"layers": shape.num_layers, "kv_heads": shape.num_kv_heads,
                  "head_dim": shape.head_dim, "max_position_embeddings": shape.max_position_embeddings,
                  "weights_bytes": shape.weights,
                  "weights_measured": shape.weight_bytes is not None},
        "device": {"kind": memory.kind, "name": memory.name, "total_bytes": memory.total_bytes,
                   "free_bytes": memory.free_bytes, "others": list(memory.others)},
        "gpu_memory_utilization": settings.gpu_memory_utilization if memory.kind == "cuda" else None,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "windows": [{"max_model_len": n, "max_concurrency": kp.max_concurrency(plan.num_blocks, n, block)}
                    for n in WINDOWS if n <= (shape.max_position_embeddings or n)],
        "longest_max_model_len": kp.longest_max_model_len(plan.num_blocks, block, 1,
                                                          shape.max_position_embeddings),
        "problems": [p.message for p in preflight.check(settings, shape, memory)],
        "profiles": [p.__dict__ for p in kp.profiles(
            shape, memory.kind, kv_cache_dtype=settings.kv_cache_dtype,
            total_bytes=memory.total_bytes, overhead=plan.overhead or kp.gpu_overhead(shape))],
    }
    # Every copy in the whole set: per GPU, times GPUs and machines (vLLM's data parallelism).
    in_all = copies * settings.data_parallel_size
    result["engine_copies"], result["copies_in_all"] = copies, in_all
    if copies_reason:
        result["copies_reason"] = copies_reason
    if in_all > 1:
        result["all_copies"] = {"kv_pool_bytes": in_all * plan.kv_pool_bytes,
                                "kv_pool_tokens": in_all * plan.kv_pool_tokens,
                                "max_concurrency": in_all * plan.max_concurrency}
    if args.users_per_copy:
        result["users_in_all"] = users_in_all(args.users_per_copy, in_all)
    if args.concurrency:
        result["reverse"] = reverse(args, settings, shape, memory, plan)
    return result


# Questions about one model's pool; with several models ask them of each model alone (--model).
SINGLE_MODEL_FLAGS = {"concurrency": "--concurrency", "users_per_copy": "--users-per-copy",
                      "from_usage": "--from-usage"}


def build_models(args: argparse.Namespace, settings: Settings) -> dict:
    """The plan of several models on one GPU (ERNIE_MODELS or --models): server/plan/models.py."""
    if used := [flag for name, flag in SINGLE_MODEL_FLAGS.items() if getattr(args, name) is not None]:
        raise BadInput(f"{', '.join(used)} plan one model; with several models run it for one of "
                       "them: plan --model NAME --gpu-memory-utilization SHARE --max-model-len N.")
    try:
        entries = parse_models(settings.models)
    except ValueError as exc:
        raise BadInput(f"ERNIE_MODELS (or --models) is not valid: {exc}") from None
    memory = device_memory(args, settings)
    planned = models.plan_models(settings, [(entry, load_shape(entry.name)[0]) for entry in entries],
                                 memory)
    return {
        "device": {"kind": memory.kind, "name": memory.name, "total_bytes": memory.total_bytes,
                   "free_bytes": memory.free_bytes, "others": list(memory.others)},
        "gpu_memory_utilization": planned.utilization, "kv_cache_dtype": settings.kv_cache_dtype,
        "share_total": planned.share_total, "at_once": planned.together,
        "models": [{"model": m.need.name, "share": m.share, "share_given": m.share_given,
                    "weights_bytes": m.need.shape.weights, **m.plan.as_dict()}
                   for m in planned.models],
        "problems": list(planned.problems),
    }


def render_models(r: dict) -> str:
    gib = lambda b: f"{b / GIB:.2f}"
    d = r["device"]
    together = r["at_once"] < len(r["models"])
    which = (f"{r['at_once']} at once, the others on demand; the {r['at_once']} largest shares add up to"
             if together else "all models, shares add up to")
    lines = [
        f"Device   {d['kind']}: {d['name']}, {gib(d['total_bytes'])} GiB total, {gib(d['free_bytes'])} "
        f"GiB free; utilization {r['gpu_memory_utilization']} for {which} "
        f"{r['share_total']:.4g}; kv dtype {r['kv_cache_dtype']}",
        "",
        f"  {'model':<32}{'share':>8}{'GiB':>8}{'weights':>9}{'other':>7}{'KV pool':>9}"
        f"{'KV tokens':>12}{'max-model-len':>15}{'requests':>10}",
    ]
    for m in r["models"]:
        o = m["overhead"]
        share = f"{m['share']:.4f}" + ("" if m["share_given"] else "*")
        lines.append(
            f"  {m['model'][-32:]:<32}{share:>8}{gib(m['share'] * d['total_bytes']):>8}"
            f"{gib(o['weights']):>9}{gib(o['before_kv'] - o['weights']):>7}{gib(m['kv_pool_bytes']):>9}"
            f"{m['kv_pool_tokens']:>12,}{m['max_model_len']:>15,}{m['max_concurrency']:>10.1f}")
    lines += ["", "GiB: the share of the GPU's total memory; other: activations and non-torch memory, which "
              "come off the share before the KV pool (CUDA graphs come on top); requests: "
              "full-length requests at once.",
              "* share computed: " + (
                  "the utilization divided by ERNIE_MODELS_AT_ONCE, one slot of the models that run "
                  "at once." if together else "the rest of the utilization, split so that these "
                  "models hold as many full-length requests each.")]
    if r["problems"]:
        lines += ["", "This set of models does not fit:"] + [f"  - {p}" for p in r["problems"]]
    return "\n".join(lines)


def users_in_all(users_per_copy: int, copies: int) -> int:
    """Chat users the whole set serves, from what one copy served (`ernie-chat capacity`).

    Copies share nothing but the balancer, so users add up; on one GPU they also share its
    compute, so this is an upper bound there: measure the set itself with `capacity`.
    """
    return users_per_copy * copies


def reverse(args, settings, shape, memory, plan) -> dict:
    """The two reverse questions: utilization for N requests; longest window for N requests."""
    block = plan.block_size
    out = {"concurrency": args.concurrency,
           "longest_max_model_len": kp.longest_max_model_len(
               plan.num_blocks, block, args.concurrency, shape.max_position_embeddings)}
    if memory.kind == "cuda":
        out["utilization_needed"] = kp.utilization_for(
            args.concurrency, settings.max_model_len, shape, memory.total_bytes,
            plan.overhead or kp.gpu_overhead(shape), block, settings.kv_cache_dtype)
    else:
        blocks = args.concurrency * kp.blocks_per_request(settings.max_model_len, block)
        out["kv_cache_gib_needed"] = blocks * kp.bytes_per_block(shape, block, settings.kv_cache_dtype) / GIB
    return out


def render(r: dict) -> str:
    gib = lambda b: f"{b / GIB:.2f} GiB"
    s = r["shape"]
    lines = [
        f"Model        {r['model']}  ({r['config_source']})",
        f"             {s['layers']} layers x {s['kv_heads']} KV heads x head_dim {s['head_dim']}, "
        f"max {s['max_position_embeddings']:,} positions, weights {gib(s['weights_bytes'])}"
        f"{'' if s['weights_measured'] else ' (estimated from the config)'}",
        f"KV per token {r['kv_bytes_per_token']:,} B ({r['kv_bytes_per_token'] / 1024:g} KiB, "
        f"kv dtype {r['kv_cache_dtype']}); block {r['block_size']} tokens",
        f"Device       {r['device']['kind']}: {r['device']['name']}, {gib(r['device']['total_bytes'])} "
        f"total, {gib(r['device']['free_bytes'])} free",
    ]
    if r.get("copies_reason"):
        lines.append(f"Copies       ERNIE_ENGINE_COPIES unset: {r['copies_reason']}")
    if r.get("all_copies"):
        a = r["all_copies"]
        lines.append(
            f"Copies       {r['copies_in_all']} engine copies in all ({r['engine_copies']} per GPU); "
            f"the figures below are one copy's (utilization {r['gpu_memory_utilization']} each, "
            f"or the KV pool given); in all: KV pool {gib(a['kv_pool_bytes'])} = "
            f"{a['kv_pool_tokens']:,} tokens, {a['max_concurrency']:.1f} requests of max-model-len at once")
    if r.get("users_in_all"):
        lines.append(f"Users        at most {r['users_in_all']:,} chat users for the {r['copies_in_all']} "
                     "copies, from the capacity one copy served (copies on one GPU share its compute: "
                     "measure them together with `ernie-chat capacity`)")
    if r.get("overhead"):
        o = r["overhead"]
        lines.append(
            f"Budget       {r['gpu_memory_utilization']} x {gib(r['device']['total_bytes'])} - weights "
            f"{gib(o['weights'])} - activations {gib(o['activation_peak'])} - non-torch "
            f"{gib(o['non_torch'])}; CUDA graphs {gib(o['cuda_graphs'])} on top")
    lines += [
        f"KV pool      {gib(r['kv_pool_bytes'])} = {r['num_blocks']:,} blocks = {r['kv_pool_tokens']:,} tokens",
        f"At max-model-len {r['max_model_len']:,}: {r['max_concurrency']:.1f} requests at once; vLLM will "
        f"log \"KV cache size: {r['reported_kv_tokens']:,} tokens\"",
        f"Longest max-model-len for one request: {r['longest_max_model_len']:,}",
        "",
        "max-model-len   full-length requests at once",
    ]
    lines += [f"{w['max_model_len']:>13,}   {w['max_concurrency']:>10.1f}" for w in r["windows"]]
    lines += ["", "Profiles computed for this device:",
              f"  {'profile':<17}{'max-model-len':>14}{'requests':>10}{'KV pool':>12}{'utilization':>13}  purpose"]
    for p in r["profiles"]:
        util = f"{p['utilization']:.2f}" if p["utilization"] is not None else "-"
        lines.append(f"  {p['name']:<17}{p['max_model_len']:>14,}{p['max_concurrency']:>10.1f}"
                     f"{gib(p['kv_pool_bytes']):>12}{util:>13}  {p['purpose']}")
    if "reverse" in r:
        rv = r["reverse"]
        lines += ["", f"For {rv['concurrency']} requests at once:"]
        if "utilization_needed" in rv:
            lines.append(f"  utilization needed at max-model-len {r['max_model_len']:,}: {rv['utilization_needed']:.4f}")
        if "kv_cache_gib_needed" in rv:
            lines.append(f"  KV cache needed at max-model-len {r['max_model_len']:,}: {rv['kv_cache_gib_needed']:.2f} GiB")
        lines.append(f"  longest max-model-len with the current pool: {rv['longest_max_model_len']:,}")
    if r["problems"]:
        lines += ["", "Problems with these settings:"] + [f"  - {p}" for p in r["problems"]]
    return "\n".join(lines)


def usage_report(path: Path, block_size: int, reply_room: Optional[int]) -> dict:
    from server.usage_log import read_usage
    records, skipped = read_usage(path)
    if not records:
        raise BadInput(f"No usable records in {path} ({skipped} unreadable lines). Chat a little first.")
    advice = kp.advise_from_usage([r["prompt_tokens"] for r in records],
                                  [r["completion_tokens"] for r in records], block_size, reply_room)
    return {**advice.__dict__, "skipped_lines": skipped, "file": str(path)}


def print_plan(args: argparse.Namespace, settings: Settings) -> int:
    result = build(args, settings)
    if "models" in result:  # several models: refused (exit 1) when they do not fit
        print(json.dumps(result, indent=2) if args.json else render_models(result))
        return 1 if result["problems"] else 0
    if args.from_usage is not None:
        path = Path(args.from_usage) if args.from_usage else settings.usage_log
        result["from_usage"] = usage_report(path, result["block_size"], args.reply_room)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(render(result))
    if "from_usage" in result:
        u = result["from_usage"]
        skipped = f" ({u['skipped_lines']} unreadable lines skipped)" if u["skipped_lines"] else ""
        print(f"\nFrom {u['requests']} recorded requests in {u['file']}{skipped}:")
        print(f"  prompt tokens p50 {u['prompt_p50']:.0f}, p99 {u['prompt_p99']:.0f}; reply p99 "
              f"{u['completion_p99']:.0f}; room for the reply {u['reply_room']}")
        print(f"  recommended ERNIE_MAX_MODEL_LEN={u['recommended_max_model_len']} "
              f"(p99 prompt + reply room, rounded up to the {result['block_size']}-token block)")
    return 0
