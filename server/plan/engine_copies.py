"""How many engine copies one GPU gets when ERNIE_ENGINE_COPIES is unset (pure).

One vLLM engine core process is the limit of a small model on a big GPU. On a lent H100 with
16 cores, one copy (4 API servers) carried about 1,250 chat users within the objective (its
1,024 places), two copies about 2,000, and three copies of two API servers each carried 3,000
in two runs of three (docs/performance.md, "3,000 users on one H100"). A copy costs its own
weights and about two cores when busy (its engine core and its API servers), so three copies
are the default where both are cheap: a small model, and the cores to run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from server.plan.device import read_memory
from server.plan.model_config import load_shape
from server.settings import Settings

GIB = 1 << 30
AUTO_COPIES = 3
MIN_CORES = 16
# The copies' weights together at most this share of the GPU's memory: each copy's KV pool
# is then still nearly a third of the GPU.
SMALL_SHARE = 0.05


@dataclass(frozen=True)
class CopiesChoice:
    copies: int
    reason: str  # one line for `up` and `plan`


def chooses_copies(settings: Settings) -> bool:
    """ERNIE_ENGINE_COPIES unset, one model, no KV pool sized by hand (ERNIE_KV_CACHE_GIB is
    each copy's), and this machine starts its own engines: the number is the stack's to choose."""
    return (settings.engine_copies is None and not settings.models
            and settings.kv_cache_gib is None and settings.starts_engine
            and settings.node_role == "head" and settings.data_parallel_size == 1)


def auto_copies(device: str, cores: int, weights_bytes: Optional[int],
                gpu_bytes: Optional[int]) -> CopiesChoice:
    """The copies for a model of ``weights_bytes`` on a GPU of ``gpu_bytes`` and ``cores`` cores."""
    if device != "cuda":
        return CopiesChoice(1, "1 engine copy (no GPU)")
    if cores < MIN_CORES:
        return CopiesChoice(1, f"1 engine copy: {AUTO_COPIES} need {MIN_CORES} cores (each copy's "
                               f"engine core and API servers take about two), this machine has {cores}")
    if weights_bytes is None or gpu_bytes is None:
        return CopiesChoice(1, "1 engine copy: the model's size or the GPU's memory could not be read")
    weights_gib, gpu_gib = weights_bytes / GIB, gpu_bytes / GIB
    if AUTO_COPIES * weights_bytes > SMALL_SHARE * gpu_bytes:
        return CopiesChoice(1, f"1 engine copy: {AUTO_COPIES} copies of {weights_gib:.1f} GiB of "
                               f"weights would take over {SMALL_SHARE:.0%} of the GPU's {gpu_gib:.0f} GiB")
    return CopiesChoice(AUTO_COPIES, f"{AUTO_COPIES} engine copies: {weights_gib:.1f} GiB of weights on "
                                     f"a {gpu_gib:.0f} GiB GPU with {cores} cores, where one copy's "
                                     "engine core is the limit of a crowd (ERNIE_ENGINE_COPIES sets it)")


def choose(settings: Settings, device: str, cores: int) -> CopiesChoice:
    """:func:`auto_copies` for the settings' model on this machine's device."""
    if device != "cuda":
        return auto_copies(device, cores, None, None)
    try:
        weights: Optional[int] = load_shape(settings.model)[0].weights
    except Exception:  # a hub model not downloaded yet, a config without a field: not known
        weights = None
    try:
        gpu: Optional[int] = read_memory(device).total_bytes
    except Exception:  # no NVML: not known
        gpu = None
    return auto_copies(device, cores, weights, gpu)
