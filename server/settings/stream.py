"""One fast stream and a fast start: vLLM's scheduling, compilation and CUDA graphs.

Each default passes no flag, so vLLM keeps its own choice (docs/notes.md, "Settings for
one fast stream").
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, BeforeValidator, Field

MAX_NGRAM_DRAFT_TOKENS = 16


def checked_ngram_draft_tokens(value: object) -> object:
    text = str(value).strip().lower()
    if text in ("off", ""):
        return "off"
    if not text.isdigit() or not 1 <= int(text) <= MAX_NGRAM_DRAFT_TOKENS:
        raise ValueError(f"must be off or a whole number of draft tokens from 1 to "
                         f"{MAX_NGRAM_DRAFT_TOKENS} (3 is a common start)")
    return int(text)


class StreamSettings(BaseModel):
    performance_mode: Literal["balanced", "interactivity", "throughput"] = Field(
        "balanced",
        description="vLLM's --performance-mode: interactivity favours one stream's latency (finer "
        "CUDA graphs, latency kernels), throughput the total tokens/s of many; balanced is "
        "vLLM's default and passes nothing.",
    )
    cudagraph_mode: Literal["auto", "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY",
                            "FULL_AND_PIECEWISE"] = Field(
        "auto",
        description="GPU only: which CUDA graphs vLLM captures (-cc.cudagraph_mode); auto keeps "
        "vLLM's choice. FULL_DECODE_ONLY captures decode graphs only (a shorter start).",
    )
    torch_compile: Literal["auto", "on", "off"] = Field(
        "auto",
        description="vLLM compiles the model with torch.compile at start (auto and on: vLLM's "
        "choice; its cache makes later starts of the same configuration quick). GPU only: off "
        "passes -cc.mode=0, a start ~10 s shorter and the same speed for one stream, but less "
        "for a crowd; CUDA graphs are then whole-step ones only (auto graphs become "
        "FULL_DECODE_ONLY). Refused on a CPU, where vLLM's worker then dies on a one-token prompt.",
    )
    model_runner: Literal["auto", "v1", "v2"] = Field(
        "auto",
        description="Which of vLLM's model runners prepares each step (VLLM_USE_V2_MODEL_RUNNER); "
        "auto keeps vLLM's choice (v2 for this model in vLLM 0.26).",
    )
    stream_interval: Optional[int] = Field(
        None,
        ge=1,
        description="Tokens vLLM gathers before it sends them on a stream (--stream-interval; "
        "unset: vLLM's 1, every token at once, the app asking for more per request in a crowd; "
        "8 on a GPU whose vLLM is older than 0.32, which cannot). More means less work for the "
        "API server per token and a less smooth stream; the first token always comes alone.",
    )
    engine_stats: bool = Field(
        True,
        description="vLLM's statistics of every step (its /metrics, the live view's engine "
        "figures, its log's throughput lines); false passes --disable-log-stats, less work per "
        "step for one fast stream, and /metrics and /status then show no engine figures.",
    )
    async_scheduling: Literal["auto", "on", "off"] = Field(
        "auto",
        description="vLLM's async scheduling (--async-scheduling / --no-async-scheduling); auto "
        "lets vLLM decide (it turns it off with n-gram speculation, and on a CPU).",
    )
    speculative_ngram: Annotated[Literal["off"] | int, BeforeValidator(checked_ngram_draft_tokens)] = Field(
        "off",
        description="n-gram speculative decoding: off, or the number of draft tokens (1-16) "
        "vLLM proposes from text already in the request (--speculative-config, method ngram). "
        "Pays off only when replies repeat their context; turns async scheduling off.",
    )

    def problems(self) -> list[str]:
        found = []
        if self.async_scheduling == "on" and self.speculative_ngram != "off":
            found.append(f"ERNIE_ASYNC_SCHEDULING=on and ERNIE_SPECULATIVE_NGRAM={self.speculative_ngram} "
                         "cannot go together: vLLM refuses async scheduling with n-gram speculation. "
                         "Set ERNIE_ASYNC_SCHEDULING=auto or off, or ERNIE_SPECULATIVE_NGRAM=off")
        if self.enforce_eager and self.cudagraph_mode not in ("auto", "NONE"):
            found.append(f"ERNIE_CUDAGRAPH_MODE={self.cudagraph_mode} asks for CUDA graphs, which "
                         "ERNIE_ENFORCE_EAGER=true turns off: unset one of them")
        if self.torch_compile == "off" and self.cudagraph_mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
            found.append(f"ERNIE_CUDAGRAPH_MODE={self.cudagraph_mode} needs the compiled model's pieces, "
                         "which ERNIE_TORCH_COMPILE=off turns off (vLLM would capture no graph): use "
                         "FULL or FULL_DECODE_ONLY, or ERNIE_TORCH_COMPILE=auto")
        return found
