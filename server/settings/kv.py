"""The KV cache and batching: the request length, the pool's size, the scheduler's budget."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, BaseModel, Field

# Without an explicit size vLLM-CPU takes gpu_memory_utilization x the machine's
# RAM (about 20 GiB on a 24 GiB machine) for its KV pool; on CPU we always size it.
DEFAULT_CPU_KV_GIB = 1.0


def checked_utilization(value: float) -> float:
    # pydantic's gt/le would say "greater than 0"; the operator needs to know why.
    if not 0 < value <= 1:
        raise ValueError("must be greater than 0 and at most 1: it is the fraction of the GPU's "
                         "total memory vLLM may use (0.9 leaves about 10% for other programs)")
    return value


class KvSettings(BaseModel):
    max_model_len: int = Field(
        8192, gt=0, description="Longest request (prompt + reply) in tokens: --max-model-len."
    )
    gpu_memory_utilization: Annotated[float, AfterValidator(checked_utilization)] = Field(
        0.90,
        description="Fraction of the GPU's TOTAL memory this vLLM may take (weights, "
        "activations, CUDA graphs and KV cache): --gpu-memory-utilization, in (0, 1].",
    )
    kv_cache_gib: Optional[float] = Field(
        None,
        gt=0,
        description="Size the KV pool directly, in GiB (--kv-cache-memory-bytes). CPU: 1 GiB when "
        "unset. GPU: replaces the sizing from utilization.",
    )
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="fp8 halves the KV bytes per token: --kv-cache-dtype."
    )
    max_num_seqs: Optional[int] = Field(
        None, ge=1, description="Most requests decoded together: --max-num-seqs."
    )
    max_num_batched_tokens: Optional[int] = Field(
        None, ge=1, description="Token budget of one scheduler step: --max-num-batched-tokens."
    )

    def problems(self) -> list[str]:
        return []

    @property
    def cpu_kv_cache_gib(self) -> float:
        """The KV pool on a CPU, where it is always sized explicitly (--kv-cache-memory-bytes)."""
        return self.kv_cache_gib if self.kv_cache_gib is not None else DEFAULT_CPU_KV_GIB
