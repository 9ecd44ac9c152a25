"""Settings -> the vLLM command line and environment (pure, no I/O).

Kept apart from the supervisor so the mapping can be read and tested on its
own, like vLLM's ``engine/arg_utils.py`` maps its CLI onto its config.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from server.settings import Settings

GIB = 1024**3
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# n-gram speculation matches the last 2 to 4 tokens against the request's earlier text
# (vLLM's own example uses 4 as the longest; docs/notes.md).
NGRAM_LOOKUP_MAX, NGRAM_LOOKUP_MIN = 4, 2


@dataclass(frozen=True)
class EngineCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def printable(self) -> str:
        """The command as a shell line, safe to log: the API key travels in env, not argv."""
        return shlex.join(self.argv)


def engine_command(settings: Settings, model: str, device: str, python: Path | str) -> EngineCommand:
    """Build the vLLM OpenAI server command for ``model`` on ``device`` ('cuda' or 'cpu')."""
    argv = [
        str(python), "-m", API_SERVER_MODULE,
        "--model", model,
        "--served-model-name", settings.served_model_name,
        "--host", settings.engine_host,
        "--port", str(settings.engine_port),
        "--max-model-len", str(settings.max_model_len),
        "--dtype", settings.dtype,
    ]
    env: dict[str, str] = {}
    if device == "cuda":
        argv += ["--gpu-memory-utilization", str(settings.gpu_memory_utilization)]
        if settings.kv_cache_gib is not None:
            argv += ["--kv-cache-memory-bytes", str(int(settings.kv_cache_gib * GIB))]
        if settings.tensor_parallel_size > 1:
            argv += ["--tensor-parallel-size", str(settings.tensor_parallel_size)]
        if settings.enforce_eager:
            argv.append("--enforce-eager")
    else:
        # The flag, not VLLM_CPU_KVCACHE_SPACE: that variable only takes whole GiB.
        argv += ["--kv-cache-memory-bytes", str(int(settings.cpu_kv_cache_gib * GIB))]
    if settings.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", settings.kv_cache_dtype]
    argv.append("--enable-prefix-caching" if settings.enable_prefix_caching else "--no-enable-prefix-caching")
    if settings.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(settings.max_num_seqs)]
    if settings.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
    # One fast stream (settings.py): each flag only when set, else vLLM keeps its own choice.
    if settings.performance_mode != "balanced":
        argv += ["--performance-mode", settings.performance_mode]
    if device == "cuda" and settings.cudagraph_mode != "auto":
        argv.append(f"-cc.cudagraph_mode={settings.cudagraph_mode}")
    if settings.stream_interval is not None:
        argv += ["--stream-interval", str(settings.stream_interval)]
    if settings.async_scheduling != "auto":
        argv.append("--async-scheduling" if settings.async_scheduling == "on" else "--no-async-scheduling")
    if settings.speculative_ngram != "off":
        argv += ["--speculative-config", json.dumps({
            "method": "ngram", "num_speculative_tokens": settings.speculative_ngram,
            "prompt_lookup_max": NGRAM_LOOKUP_MAX, "prompt_lookup_min": NGRAM_LOOKUP_MIN})]
    if settings.api_key_value:
        # vLLM reads VLLM_API_KEY itself; keeping the key out of argv keeps it out of
        # `ps`, our logs and vLLM's own "non-default args" line.
        env["VLLM_API_KEY"] = settings.api_key_value
    argv += shlex.split(settings.extra_engine_args)
    return EngineCommand(argv=argv, env=env)
