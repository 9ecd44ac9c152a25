"""KV-cache arithmetic, the way vLLM (V1 engine) does it: pure functions, no I/O.

How vLLM sizes its KV pool (docs/notes.md, vLLM ``v1/core/kv_cache_utils.py``):

* one token of KV cache costs ``2 (K and V) x layers x kv_heads x head_dim x dtype
  bytes``; for ERNIE-4.5-0.3B in bf16 that is 2 x 18 x 2 x 128 x 2 = 18 KiB;
* memory is handed out in blocks of ``block_size`` tokens (16 on GPU, 128 on CPU)
  for all layers at once, so the pool holds ``available // (bytes/token x
  block_size)`` whole blocks;
* a request of ``max_model_len`` tokens needs ``ceil(max_model_len / block_size)``
  blocks, so concurrency = blocks / that, and vLLM prints "KV cache size" as
  ``int(concurrency x max_model_len)`` tokens;
* on a GPU the pool is what is left of ``utilization x total memory`` after the
  weights, the activation peak of the profiling run and non-torch memory (CUDA
  context, NCCL, allocator slack): :class:`GpuOverhead`. The CUDA-graph pool is
  captured after the KV pool is allocated, so it comes on top of the share (vLLM
  0.26 logs it as "Actual usage ... for CUDAGraph memory" and leaves it out of
  "Available KV cache memory").
  ``--max-model-len`` does not size the pool; it only bounds one request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

GIB = 1024**3
MIB = 1024**2

KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4,
                  "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
BLOCK_SIZE = {"cuda": 16, "cpu": 128}

# GPU overheads outside the weights that vLLM's profiling run finds: vLLM 0.26's own
# accounting on an H200 ("Actual usage is ..." in its log), the same for the 0.3B shape and a
# 1B one (docs/memory.md, "Several models"); `tune` measures them for the machine at hand.
DEFAULT_NON_TORCH_BYTES = int(0.22 * GIB)      # CUDA context, cuBLAS workspaces, NCCL
DEFAULT_CUDA_GRAPH_BYTES = int(0.40 * GIB)     # graph pool for decode batch sizes, on top
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192          # vLLM's default for an online server
DEFAULT_MAX_NUM_SEQS = 256


@dataclass(frozen=True)
class ModelShape:
    """The parts of a model's config.json that decide its memory use."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = True
    weight_dtype_bytes: int = 2
    weight_bytes: Optional[int] = None  # measured from the safetensors; else estimated

    @classmethod
    def from_config(cls, config: dict, name: str = "", weight_bytes: Optional[int] = None):
        text = config.get("text_config", config)  # multimodal configs nest the LM's
        heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        dtype = str(text.get("torch_dtype") or text.get("dtype") or "bfloat16").replace("torch.", "")
        return cls(
            name=name or text.get("_name_or_path", "") or "model",
            num_layers=int(text["num_hidden_layers"]),
            num_kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or hidden // heads),
            hidden_size=hidden,
            num_attention_heads=heads,
            intermediate_size=int(text.get("intermediate_size") or 4 * hidden),
            vocab_size=int(text["vocab_size"]),
            max_position_embeddings=int(text.get("max_position_embeddings") or 0),
            tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
            weight_dtype_bytes=KV_DTYPE_BYTES.get(dtype, 2),
            weight_bytes=weight_bytes,
        )

    @property
    def parameter_count(self) -> int:
        """Dense decoder parameters: embeddings, attention, gated MLP, norms."""
        h, hd = self.hidden_size, self.head_dim
        attention = h * self.num_attention_heads * hd * 2 + h * self.num_kv_heads * hd * 2
        mlp = 3 * h * self.intermediate_size
        per_layer = attention + mlp + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_layers * per_layer + h

    @property
    def weights(self) -> int:
        return self.weight_bytes or self.parameter_count * self.weight_dtype_bytes


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int = 2) -> int:
    """'auto' follows the model's dtype; fp8 halves bf16."""
    return model_dtype_bytes if kv_cache_dtype == "auto" else KV_DTYPE_BYTES[kv_cache_dtype]


def kv_bytes_per_token(shape: ModelShape, kv_cache_dtype: str = "auto") -> int:
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * kv_dtype_bytes(
        kv_cache_dtype, shape.weight_dtype_bytes)


def bytes_per_block(shape: ModelShape, block_size: int, kv_cache_dtype: str = "auto") -> int:
    return kv_bytes_per_token(shape, kv_cache_dtype) * block_size


def num_blocks(kv_pool_bytes: int, shape: ModelShape, block_size: int,
               kv_cache_dtype: str = "auto") -> int:
    return max(0, int(kv_pool_bytes) // bytes_per_block(shape, block_size, kv_cache_dtype))


def blocks_per_request(max_model_len: int, block_size: int) -> int:
    return math.ceil(max_model_len / block_size)


def max_concurrency(blocks: int, max_model_len: int, block_size: int) -> float:
    """How many requests of ``max_model_len`` tokens fit in the pool at once."""
    return blocks / blocks_per_request(max_model_len, block_size)


def reported_kv_tokens(blocks: int, max_model_len: int, block_size: int) -> int:
    """The "KV cache size: N tokens" figure exactly as vLLM computes it for its log."""
    return int(max_concurrency(blocks, max_model_len, block_size) * max_model_len)


def longest_max_model_len(blocks: int, block_size: int, concurrency: float = 1.0,
                          limit: Optional[int] = None) -> int:
    """The largest max-model-len that still admits ``concurrency`` full-length requests."""
    length = int(blocks / concurrency) * block_size
    return min(length, limit) if limit else length


# --- GPU memory budget -----------------------------------------------------

@dataclass(frozen=True)
class GpuOverhead:
    """What a vLLM takes besides its KV pool: all but the CUDA graphs come off its share
    (utilization x total) before the pool; the graphs come on top (module docstring)."""

    weights: int
    activation_peak: int
    non_torch: int
    cuda_graphs: int

    @property
    def before_kv(self) -> int:
        """What vLLM's profiling subtracts from its share before the KV pool."""
        return self.weights + self.activation_peak + self.non_torch

    @property
    def total(self) -> int:
        return self.before_kv + self.cuda_graphs


def activation_peak_bytes(shape: ModelShape, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Peak of vLLM's profiling forward pass, modelled from the largest live tensors.

    The dummy batch has ``max_num_batched_tokens`` tokens; the biggest tensors alive
    at once are the residual stream and its normed copy, the fused QKV output and the
    gated MLP's two intermediate halves (bf16), plus fp32 logits for the sampled rows
    (one per sequence) and the sampler's softmax copy of them.
    """
    t, h, a = max_num_batched_tokens, shape.hidden_size, shape.weight_dtype_bytes
    qkv = (shape.num_attention_heads + 2 * shape.num_kv_heads) * shape.head_dim
    hidden_states = t * (2 * h + qkv + 2 * shape.intermediate_size) * a
    logits = 2 * max_num_seqs * shape.vocab_size * 4
    return hidden_states + logits


def gpu_overhead(shape: ModelShape, *, enforce_eager: bool = False,
                 max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                 max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                 non_torch: int = DEFAULT_NON_TORCH_BYTES,
                 cuda_graphs: int = DEFAULT_CUDA_GRAPH_BYTES,
                 tensor_parallel_size: int = 1) -> GpuOverhead:
    return GpuOverhead(
        weights=shape.weights // tensor_parallel_size,
        activation_peak=activation_peak_bytes(shape, max_num_batched_tokens, max_num_seqs),
        non_torch=non_torch,
        cuda_graphs=0 if enforce_eager else cuda_graphs,
    )


def gpu_kv_pool_bytes(total_bytes: int, utilization: float, overhead: GpuOverhead) -> int:
    return max(0, int(utilization * total_bytes) - overhead.before_kv)


def utilization_for(concurrency: float, max_model_len: int, shape: ModelShape, total_bytes: int,
                    overhead: GpuOverhead, block_size: int = BLOCK_SIZE["cuda"],
                    kv_cache_dtype: str = "auto") -> float:
    """The utilization that gives room for ``concurrency`` requests of ``max_model_len``."""
    blocks = math.ceil(concurrency * blocks_per_request(max_model_len, block_size))
    needed = blocks * bytes_per_block(shape, block_size, kv_cache_dtype) + overhead.before_kv
    # Rounded UP to the 4 decimals a person would type: vLLM computes int(u x total),
    # and the exact quotient can land a byte, and so a block, short.
    return math.ceil(needed / total_bytes * 10_000) / 10_000


# --- one plan ----------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    device: str
    block_size: int
    kv_bytes_per_token: int
    kv_pool_bytes: int
    num_blocks: int
    kv_pool_tokens: int          # blocks x block_size: what the pool holds
    max_model_len: int
    max_concurrency: float
    reported_kv_tokens: int      # what vLLM's log will print
    overhead: Optional[GpuOverhead] = None

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "overhead"}
        if self.overhead is not None:
            out["overhead"] = {**self.overhead.__dict__, "before_kv": self.overhead.before_kv,
                               "total": self.overhead.total}
        return out


def plan(shape: ModelShape, *, device: str, max_model_len: int, kv_pool_bytes: int,
         kv_cache_dtype: str = "auto", overhead: Optional[GpuOverhead] = None) -> Plan:
    block = BLOCK_SIZE[device]
    blocks = num_blocks(kv_pool_bytes, shape, block, kv_cache_dtype)
    return Plan(
        device=device, block_size=block,
        kv_bytes_per_token=kv_bytes_per_token(shape, kv_cache_dtype),
        kv_pool_bytes=int(kv_pool_bytes), num_blocks=blocks, kv_pool_tokens=blocks * block,
        max_model_len=max_model_len,
        max_concurrency=max_concurrency(blocks, max_model_len, block),
        reported_kv_tokens=reported_kv_tokens(blocks, max_model_len, block),
        overhead=overhead,
    )


# --- profiles computed for the device ---------------------------------------

@dataclass(frozen=True)
class Profile:
    name: str
    purpose: str
    max_model_len: int
    max_concurrency: float        # full-length requests the pool holds
    kv_pool_bytes: int
    utilization: Optional[float]  # GPU only: the smallest that gives this pool


# (name, purpose, window, full-length requests wanted at once). 256 is vLLM's default
# --max-num-seqs: more KV room than that cannot be used by one engine anyway.
PROFILE_TARGETS = [
    ("high-concurrency", "many short chats", 2048, 256),
    ("balanced", "everyday chat with room for pasted text", 8192, 64),
    ("long-text", "long documents, few at a time", 32768, 8),
]
MAX_UTILIZATION = 0.95


def profiles(shape: ModelShape, device: str, *, kv_cache_dtype: str = "auto",
             total_bytes: Optional[int] = None, overhead: Optional[GpuOverhead] = None,
             max_utilization: float = MAX_UTILIZATION) -> list[Profile]:
    """Replace hand-picked (max-model-len, utilization) pairs with ones computed here.

    Each profile asks for a window and a number of full-length requests at once, and
    gets the KV pool that holds them: on a GPU as the smallest utilization (leaving
    the rest of the card free), capped at ``max_utilization`` with the concurrency
    that cap allows; on a CPU as the KV space to set.
    """
    block = BLOCK_SIZE[device]
    per_block = bytes_per_block(shape, block, kv_cache_dtype)
    out = []
    for name, purpose, window, wanted in PROFILE_TARGETS:
        window = min(window, shape.max_position_embeddings or window)
        pool = math.ceil(wanted * blocks_per_request(window, block)) * per_block
        utilization = None
        if device == "cuda":
            assert total_bytes and overhead is not None, "a GPU profile needs the device's memory"
            utilization = (pool + overhead.before_kv) / total_bytes
            if utilization > max_utilization:
                utilization = max_utilization
                pool = gpu_kv_pool_bytes(total_bytes, utilization, overhead)
            else:
                utilization = math.ceil(utilization * 100) / 100
        blocks = pool // per_block
        out.append(Profile(name, purpose, window, max_concurrency(blocks, window, block), pool,
                           utilization))
    return out


# --- recorded usage ----------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class UsageAdvice:
    requests: int
    prompt_p50: float
    prompt_p99: float
    completion_p99: float
    reply_room: int
    recommended_max_model_len: int


def advise_from_usage(prompt_tokens: list[int], completion_tokens: list[int],
                      block_size: int, reply_room: Optional[int] = None) -> UsageAdvice:
    """max-model-len = p99 prompt + room for the reply (p99 reply unless given), block-rounded."""
    room = reply_room if reply_room is not None else int(math.ceil(percentile(completion_tokens, 99)))
    p99 = percentile(prompt_tokens, 99)
    wanted = math.ceil((p99 + room) / block_size) * block_size
    return UsageAdvice(len(prompt_tokens), percentile(prompt_tokens, 50), p99,
                       percentile(completion_tokens, 99), room, wanted)
