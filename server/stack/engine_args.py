"""Settings -> the vLLM command line and environment (pure but for reading os.environ and
the cores this process may run on).

Kept apart from the supervisor so the mapping can be read and tested on its
own, like vLLM's ``engine/arg_utils.py`` maps its CLI onto its config.

The engine runs vLLM's ``serve`` command (through ``server.stack.vllm_serve``,
which works for the CPU build too): only ``serve`` runs several API server
processes.  With several engine copies on one machine, each copy is one
``serve`` on a loopback port of its own with its share of the GPU, and the
balancer listens where the engine would (``server.stack.topology``).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from server.plan.preflight import per_copy_settings
from server.settings import Settings

GIB = 1024**3
SERVE_MODULE = "server.stack.vllm_serve"


@dataclass(frozen=True)
class EngineCopy:
    """One engine copy: where it listens, its share of the device, its API servers."""

    host: str
    port: int
    api_servers: int = 1
    index: int = 0
    copies: int = 1   # on this GPU: each takes 1/copies of ERNIE_GPU_MEMORY_UTILIZATION

    @classmethod
    def only(cls, settings: Settings, api_servers: int = 1) -> "EngineCopy":
        """The single engine of a machine without copies, where the settings say."""
        return cls(settings.engine_host, settings.engine_port, api_servers)
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


def data_parallel_flags(settings: Settings, copy: EngineCopy) -> list[str]:
    """vLLM's own data parallelism: copies on several GPUs and machines behind one server.

    Each copy per GPU (ERNIE_ENGINE_COPIES) is a data-parallel group of its own, so the
    Nth one talks to its other machines on the RPC port + N.
    """
    if settings.data_parallel_size == 1:
        return []
    flags = ["--data-parallel-size", str(settings.data_parallel_size)]
    if settings.data_parallel_size_local is not None:
        flags += ["--data-parallel-size-local", str(settings.data_parallel_size_local)]
    if settings.data_parallel_address:
        flags += ["--data-parallel-address", settings.data_parallel_address,
                  "--data-parallel-rpc-port", str(settings.data_parallel_rpc_port + copy.index)]
    if settings.node_role == "engines":
        flags += ["--headless", "--data-parallel-start-rank", str(settings.data_parallel_start_rank)]
    return flags


def start_method(settings: Settings, device: str) -> str:
    """fork: ``vllm serve`` asks for spawn, so its engine core process imports vLLM a second
    time, and its worker a third. Forked, they inherit the API server's imports: on the H200
    with one API server that phase took 1 s instead of 28-30 s (start to ready 43 s); on 2 CPU
    cores a start took 16 s instead of 28. vLLM always spawns several API servers, and the
    engine core waits for them (26-47 s on the H200, docs/performance.md, "Start-up"): with
    fork, ``vllm_serve`` forks those too, and keeps fork where the CPU build would set spawn.
    vLLM still spawns the engine core when CUDA is already initialized in the parent.

    Data parallelism on a CPU keeps spawn: forked there, with both cores busy, one of four
    requests to a head whose second copy ran on an engines node hung for 120 s; spawned, the
    same load passed (one run each)."""
    if settings.engine_process_start != "auto":
        return settings.engine_process_start
    return "spawn" if device != "cuda" and settings.data_parallel_size > 1 else "fork"


def cpu_share(cpus: Sequence[int], index: int, copies: int) -> Optional[str]:
    """The cores copy ``index`` of ``copies`` binds its OpenMP threads to on a CPU
    (``VLLM_CPU_OMP_THREADS_BIND``), or None where there are fewer cores than copies.

    Left to vLLM (``auto``), every copy picks the same cores, since each process picks alone:
    on 2 cores both copies bind core 0, on 16 both put a thread on each of 15 cores, two
    threads a core (docs/notes.md). Each copy gets a contiguous share instead, less one core
    for its own API server and engine core process where the share has two or more, as
    vLLM's ``auto`` leaves one for them."""
    if copies < 2 or len(cpus) < copies:
        return None
    ids, size = sorted(cpus), len(cpus) // copies
    share = ids[index * size:] if index == copies - 1 else ids[index * size:(index + 1) * size]
    bound = share[:-1] if len(share) > 1 else share
    return ",".join(str(cpu) for cpu in bound)


def one_thread_per_core(cpus: Sequence[int], topology: Path = Path("/sys/devices/system/cpu")) -> list[int]:
    """The first logical CPU of each physical core among ``cpus``: with SMT, two OpenMP
    threads on one core's two hardware threads slow each other, and vLLM's ``auto`` binds one
    per core too. Where the kernel does not say, every CPU counts as a core."""
    kept, seen = [], set()
    for cpu in sorted(cpus):
        try:
            siblings = (topology / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip()
        except OSError:
            siblings = str(cpu)
        if siblings not in seen:
            seen.add(siblings)
            kept.append(cpu)
    return kept


def omp_bind(settings: Settings, copy: EngineCopy, cpus: Optional[Sequence[int]]) -> dict[str, str]:
    """A CPU copy's share of the cores, unless the user set the binding or vLLM's data
    parallelism splits them among its ranks itself."""
    if settings.data_parallel_size > 1 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return {}
    cpus = one_thread_per_core(os.sched_getaffinity(0)) if cpus is None else cpus
    share = cpu_share(cpus, copy.index, copy.copies)
    return {"VLLM_CPU_OMP_THREADS_BIND": share} if share else {}


def worker_in_engine_core(settings: Settings, copy: EngineCopy, cpus: Optional[Sequence[int]]) -> bool:
    """Whether a CPU engine runs its model worker inside its engine core process (vLLM's
    ``uni`` executor) instead of a process of its own.

    On two cores vLLM's own choice binds its worker's one OpenMP thread to one core and keeps
    the other for the API server and engine core, and the worker's process imports vLLM once
    more: in the engine core, with one OpenMP thread too, a start was ready in 19-20 s instead
    of 31-32 s and served as many tokens a second, idle or beside two busy processes
    (docs/notes.md, "vLLM on a CPU"). With more cores, engine copies, data parallelism or a
    binding the user set, the bound worker process stays: binding is done only for a worker
    process of its own."""
    if copy.copies > 1 or settings.data_parallel_size > 1 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return False
    cores = one_thread_per_core(os.sched_getaffinity(0)) if cpus is None else cpus
    return len(cores) <= 2


def cpu_compile_cache(environ: Mapping[str, str]) -> dict[str, str]:
    """vLLM's older compile cache on a CPU, unless the user chose: the CPU build 0.32 saves its
    AOT-compiled model but fails to load it ("'function' object has no attribute
    'finalize_loading'") and compiles again at every start; the older cache loads, a warm start
    ready in 25-27 s instead of 30-32 s (docs/notes.md, "vLLM on a CPU")."""
    return {} if "VLLM_USE_AOT_COMPILE" in environ else {"VLLM_USE_AOT_COMPILE": "0"}


def triton_cache(environ: Mapping[str, str]) -> dict[str, str]:
    """Triton's one cache for every configuration (its default, ~/.triton/cache), set
    explicitly, unless the user chose one.

    With torch.compile on, vLLM 0.26 points Inductor at a cache of each configuration's hash
    (``compilation/decorators.py``), and Inductor points Triton there too when the variable is
    unset (``triton_heuristics.py``), for the whole engine process. So every new configuration
    (a tune point, two copies, another length) compiled vLLM's own ~57 Triton kernels (its
    model runner's and the sampler's) again: the "kernel warm-up after capture" of 12-17 s on
    the H200. Triton keys its cache by each kernel's source and target, so one cache serves
    all configurations (docs/performance.md, "Start-up")."""
    if "TRITON_CACHE_DIR" in environ:
        return {}
    return {"TRITON_CACHE_DIR": str(Path(environ.get("HOME") or Path.home()) / ".triton" / "cache")}


def engine_command(settings: Settings, model: str, device: str, python: Path | str,
                   copy: Optional[EngineCopy] = None,
                   cpus: Optional[Sequence[int]] = None) -> EngineCommand:
    """Build the ``vllm serve`` command for ``model`` on ``device`` ('cuda' or 'cpu');
    ``cpus``: the cores this process may run on (None: as the kernel says now)."""
    copy = copy or EngineCopy.only(settings)
    settings = per_copy_settings(settings, copy.copies)
    argv = [
        str(python), "-m", SERVE_MODULE, model,
        "--served-model-name", settings.served_model_name,
        "--host", copy.host,
        "--port", str(copy.port),
        "--max-model-len", str(settings.max_model_len),
        "--dtype", settings.dtype,
    ]
    argv += data_parallel_flags(settings, copy)
    # One is vLLM's default only without data parallelism; with it vLLM starts one per copy.
    if settings.node_role == "head" and (copy.api_servers > 1 or settings.data_parallel_size > 1):
        argv += ["--api-server-count", str(copy.api_servers)]
    env = {"VLLM_WORKER_MULTIPROC_METHOD": start_method(settings, device),
           "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(settings.engine_keepalive_limit_s)}
    if device == "cuda":
        env.update(triton_cache(os.environ))
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
        env.update(omp_bind(settings, copy, cpus))
        env.update(cpu_compile_cache(os.environ))
        if worker_in_engine_core(settings, copy, cpus):
            argv += ["--distributed-executor-backend", "uni"]
            # vLLM's CPU platform turns ``uni`` back into ``mp`` unless this is off; the API
            # server's AsyncLLM keeps its engine core process either way.
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            # One compute thread, as vLLM's binding gives the worker on 2 cores: two unbound
            # OpenMP threads wait for each other at every barrier whenever another process
            # takes a core, and served less than half as many tokens then.
            if "OMP_NUM_THREADS" not in os.environ:
                env["OMP_NUM_THREADS"] = "1"
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
    compiled = settings.torch_compile != "off"  # auto: vLLM's choice, which compiles
    if not compiled:
        argv.append("-cc.mode=0")  # vLLM's CompilationMode.NONE
    if device == "cuda" and settings.cudagraph_mode != "auto":
        argv.append(f"-cc.cudagraph_mode={settings.cudagraph_mode}")
    elif device == "cuda" and not compiled:
        # vLLM's own choice, FULL_AND_PIECEWISE, needs the compiled model's pieces: without
        # compile vLLM would silently capture no graph at all.
        argv.append("-cc.cudagraph_mode=FULL_DECODE_ONLY")
    if settings.model_runner != "auto":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if settings.model_runner == "v2" else "0"
    if settings.stream_interval is not None:
        argv += ["--stream-interval", str(settings.stream_interval)]
    if not settings.engine_stats:
        argv.append("--disable-log-stats")
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
