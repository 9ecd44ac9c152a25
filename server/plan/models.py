"""Several models on one GPU (ERNIE_MODELS): each one's share of the memory, KV pool and concurrency.

Each model is a vLLM of its own whose --gpu-memory-utilization is its share, so its pool is
exactly the single-model plan at that share (:func:`preflight.plan_for`). The shares together
stay within ERNIE_GPU_MEMORY_UTILIZATION. Shares not given split the rest by need: each such
model first gets what comes off its share before the KV pool (weights, activation peak,
non-torch memory), then
the KV memory left goes in proportion to the KV bytes of one request at its max-model-len, so
that every one of them holds the same number of full-length requests. Shares are rounded down
to the 4 decimals a person would type, so they never add up to more than the utilization.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from server.errors import BadInput
from server.plan import kv_planner as kp
from server.plan import preflight
from server.plan.device import DeviceMemory
from server.settings import Settings
from server.settings.model_list import ModelEntry, models_problems, on_demand_shares, starts_on_demand

GIB = kp.GIB
# The fix every refusal of a set offers beside its own: fewer models at once, the rest on demand.
FEWER = ("(or fewer at once: ERNIE_MODELS_AT_ONCE=N starts the others on demand; "
         "`ernie-chat plan --at-once N` shows that plan)")


@dataclass(frozen=True)
class ModelNeed:
    """One model of the set with what it takes before and after its KV pool."""

    name: str
    max_model_len: int
    share: Optional[float]       # as given; None: split by need
    shape: kp.ModelShape
    overhead: kp.GpuOverhead
    request_bytes: int           # KV of one request of max_model_len, whole blocks
    kv_cache_dtype: str

    @property
    def minimum_bytes(self) -> int:
        """The least share it starts with: what comes off it before the KV pool, and one
        full-length request."""
        return self.overhead.before_kv + self.request_bytes


@dataclass(frozen=True)
class ModelPlan:
    need: ModelNeed
    share: float
    plan: kp.Plan

    @property
    def share_given(self) -> bool:
        return self.need.share is not None


@dataclass(frozen=True)
class ModelsPlan:
    memory: DeviceMemory
    utilization: float
    models: tuple[ModelPlan, ...]
    problems: tuple[str, ...]    # empty: the set fits

    at_once: int = 0             # how many run together (ERNIE_MODELS_AT_ONCE); 0: all

    @property
    def share_total(self) -> float:
        """The memory of the models that run together: the largest shares when not all do."""
        return sum(sorted((model.share for model in self.models), reverse=True)[:self.together])

    @property
    def together(self) -> int:
        return self.at_once or len(self.models)


def model_settings(settings: Settings, name: str, max_model_len: int, share: float) -> Settings:
    """The settings of the one vLLM that serves ``name`` with its share."""
    return settings.model_copy(update={"model": name, "max_model_len": max_model_len,
                                       "gpu_memory_utilization": share, "kv_cache_gib": None,
                                       "models": ""})


def need_for(settings: Settings, entry: ModelEntry, shape: kp.ModelShape) -> ModelNeed:
    length = entry.max_model_len or settings.max_model_len
    block = kp.BLOCK_SIZE["cuda"]
    request = kp.blocks_per_request(length, block) * kp.bytes_per_block(shape, block, settings.kv_cache_dtype)
    return ModelNeed(entry.name, length, entry.share, shape,
                     preflight.gpu_overhead_for(settings, shape), request, settings.kv_cache_dtype)


def rest_bytes(needs: tuple[ModelNeed, ...], utilization: float, total_bytes: int) -> int:
    """What the given shares leave of the utilization for the models without one."""
    given = sum(need.share for need in needs if need.share is not None)
    return int((utilization - given) * total_bytes)


def split_shares(needs: tuple[ModelNeed, ...], utilization: float, total_bytes: int) -> tuple[float, ...]:
    """Each model's share: the one given, or its part of the rest by need (module docstring)."""
    unshared = [need for need in needs if need.share is None]
    rest = max(0, rest_bytes(needs, utilization, total_bytes))
    overheads = sum(need.overhead.before_kv for need in unshared) or 1
    kv_left = rest - overheads
    wanted = sum(need.request_bytes for need in unshared) or 1

    def computed(need: ModelNeed) -> float:
        # A rest too small even for the overheads (refused by rest_problem) is split by them,
        # so that the shares never add up to more than the utilization.
        part = (need.overhead.before_kv + kv_left * need.request_bytes / wanted if kv_left > 0
                else rest * need.overhead.before_kv / overheads)
        return math.floor(part / total_bytes * 10_000) / 10_000

    return tuple(need.share if need.share is not None else computed(need) for need in needs)


def rest_problem(needs: tuple[ModelNeed, ...], utilization: float, total_bytes: int) -> Optional[str]:
    unshared = [need for need in needs if need.share is None]
    rest = rest_bytes(needs, utilization, total_bytes)
    wanted = sum(need.minimum_bytes for need in unshared)
    if not unshared or rest >= wanted:
        return None
    names = ", ".join(need.name for need in unshared)
    return (f"The models given no share ({names}) get the rest of ERNIE_GPU_MEMORY_UTILIZATION={utilization}, "
            f"{max(rest, 0) / GIB:.2f} GiB, but need at least {wanted / GIB:.2f} GiB (weights, "
            f"activations, overheads and one request at max-model-len each): short by "
            f"{(wanted - rest) / GIB:.2f} GiB. Lower the other models' shares, raise "
            f"ERNIE_GPU_MEMORY_UTILIZATION, lower their max-model-len, or serve fewer models {FEWER}.")


def model_problems(model: ModelPlan, total_bytes: int) -> list[str]:
    """What stops this model's vLLM from starting with its share."""
    need, plan = model.need, model.plan
    problems = []
    limit = need.shape.max_position_embeddings
    if limit and need.max_model_len > limit:
        problems.append(f"{need.name}: max-model-len {need.max_model_len} is above the model's "
                        f"max_position_embeddings ({limit}): write {need.name}:{limit} or less in "
                        "ERNIE_MODELS.")
    if plan.num_blocks >= kp.blocks_per_request(need.max_model_len, plan.block_size):
        return problems
    have = int(model.share * total_bytes)
    fits = kp.longest_max_model_len(plan.num_blocks, plan.block_size)
    shorter = f", write {need.name}:{fits} to give it a max-model-len that fits" if fits else ""
    smallest = kp.utilization_for(1, need.max_model_len, need.shape, total_bytes, need.overhead,
                                  plan.block_size, need.kv_cache_dtype)
    problems.append(
        f"{need.name}: share {model.share:g} gives {have / GIB:.2f} GiB, but its weights, activations "
        f"and overheads ({need.overhead.before_kv / GIB:.2f} GiB) and one request of max-model-len "
        f"{need.max_model_len:,} ({need.request_bytes / GIB:.2f} GiB) need "
        f"{need.minimum_bytes / GIB:.2f} GiB: short by {(need.minimum_bytes - have) / GIB:.2f} GiB. "
        f"Give it a share of {smallest:g} or more{shorter}, or serve fewer models {FEWER}.")
    return problems


def free_problem(share_total: float, memory: DeviceMemory) -> Optional[str]:
    wanted = share_total * memory.total_bytes
    if wanted <= memory.free_bytes:
        return None
    others = "; ".join(memory.others) or "no other process is visible to NVML"
    return (f"The models' shares add up to {share_total:.4g} = {wanted / GIB:.2f} GiB, but only "
            f"{memory.free_bytes / GIB:.2f} GiB are free on {memory.name} ({others}): short by "
            f"{(wanted - memory.free_bytes) / GIB:.2f} GiB. Lower the shares or "
            f"ERNIE_GPU_MEMORY_UTILIZATION, serve fewer models {FEWER}, or stop the other processes.")


def plan_models(settings: Settings, shaped: list[tuple[ModelEntry, kp.ModelShape]],
                memory: DeviceMemory) -> ModelsPlan:
    """The plan of every model in ERNIE_MODELS on ``memory``, with every reason it does not fit."""
    if memory.kind != "cuda":
        raise BadInput("ERNIE_MODELS splits a GPU's memory; this is a CPU. Plan for a GPU with "
                       "--gpu-memory-gib N (its total memory), or unset ERNIE_MODELS.")
    utilization, total = settings.gpu_memory_utilization, memory.total_bytes
    needs = tuple(need_for(settings, entry, shape) for entry, shape in shaped)
    entries = tuple(entry for entry, _ in shaped)
    at_once = settings.models_at_once if starts_on_demand(entries, settings.models_at_once) else 0
    shares = (on_demand_shares(entries, utilization, at_once) if at_once
              else split_shares(needs, utilization, total))
    models = tuple(ModelPlan(need, share, preflight.plan_for(
        model_settings(settings, need.name, need.max_model_len, share), need.shape, memory))
        for need, share in zip(needs, shares))
    problems = models_problems(entries, utilization, settings.kv_cache_gib, settings.copies_per_gpu, total,
                               at_once=settings.models_at_once)
    if not at_once and (problem := rest_problem(needs, utilization, total)):
        problems.append(problem)
    else:  # a share the rest could not pay for is reported once, above
        problems += [p for model in models for p in model_problems(model, total)]
    # Shares above the utilization are refused above; the GPU must have room for the rest.
    planned = ModelsPlan(memory, utilization, models, (), at_once)
    if problem := free_problem(min(planned.share_total, utilization), memory):
        problems.append(problem)
    return dataclasses.replace(planned, problems=tuple(problems))


def cpu_problems(settings: Settings, shaped: list[tuple[ModelEntry, kp.ModelShape]],
                 memory: DeviceMemory) -> list[str]:
    """On a CPU each model's vLLM gets the KV pool one model gets alone (ERNIE_KV_CACHE_GIB is
    refused with ERNIE_MODELS): each pool must hold one request of its max-model-len, and the
    pools of the models that run together (the largest ERNIE_MODELS_AT_ONCE of them) must fit
    in the memory free now."""
    problems, pools = [], []
    for entry, shape in shaped:
        alone = model_settings(settings, entry.name, entry.max_model_len or settings.max_model_len,
                               settings.gpu_memory_utilization)
        problems += [f"{entry.name}: {problem}" for problem in preflight.check(alone, shape, memory)]
        pools.append(int(alone.cpu_kv_cache_gib * GIB))
    together = settings.models_at_once or len(pools)
    wanted = sum(sorted(pools, reverse=True)[:together])
    if wanted > memory.free_bytes:
        which = (f"The {together} largest KV pools of the models (ERNIE_MODELS_AT_ONCE={together} "
                 "run at once)" if together < len(pools) else "The models' KV pools")
        problems.append(f"{which} add up to {wanted / GIB:.2f} GiB, but only "
                        f"{memory.free_bytes / GIB:.2f} GiB of memory are free: short by "
                        f"{(wanted - memory.free_bytes) / GIB:.2f} GiB. Serve fewer models {FEWER}, "
                        "or stop other programs.")
    return problems


def fit(settings: Settings, shaped: list[tuple[ModelEntry, kp.ModelShape]],
        memory: DeviceMemory) -> tuple[tuple[Optional[float], ...], list[str]]:
    """Each model's share of the GPU (None on a CPU) and every reason the set does not fit;
    on a GPU the plan `ernie-chat plan --models` prints."""
    if memory.kind != "cuda":
        return (None,) * len(shaped), cpu_problems(settings, shaped, memory)
    planned = plan_models(settings, shaped, memory)
    return tuple(model.share for model in planned.models), list(planned.problems)
