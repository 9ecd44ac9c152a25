"""server/stack/doctor.py: each rule on the line vLLM really prints, and the diagnosis around it."""

from __future__ import annotations

import pytest

from server.stack.doctor import RULES, START_MARKER, diagnose, explain, last_error_lines

# Lines a healthy start-up prints; none of them is a finding.
CLEAN_LOG = [
    f"{START_MARKER} at 2026-11-29 10:00:00",
    "(APIServer pid=1) INFO 11-29 10:00:01 [api_server.py:1800] vLLM API server version 0.33.0",
    "(EngineCore pid=7) INFO 11-29 10:00:20 [gpu_worker.py:298] Available KV cache memory: 12.34 GiB",
    "(EngineCore pid=7) INFO 11-29 10:00:20 [kv_cache_utils.py:1300] GPU KV cache size: 1,234,560 "
    "tokens, Maximum concurrency for 8,192 tokens per request: 150.70x",
    "(APIServer pid=1) INFO 11-29 10:00:30 [launcher.py:40] Route: /v1/chat/completions, Methods: POST",
    "(APIServer pid=1) INFO:     Application startup complete.",
    "(APIServer pid=1) INFO 11-29 10:01:00 [loggers.py:200] Engine 000: Avg prompt throughput: 0.0 "
    "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%",
    "(APIServer pid=1) INFO:     127.0.0.1:50000 - \"GET /health HTTP/1.1\" 200 OK",
]

# key -> (a line vLLM prints, texts the finding must contain)
CASES = {
    "cuda_oom": (
        "(EngineCore pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 139.81 GiB of which 1.02 GiB is free.",
        ["ERNIE_GPU_MEMORY_UTILIZATION", "ERNIE_MAX_NUM_SEQS"],
    ),
    "free_memory_below_utilization": (
        "ValueError: Free memory on device cuda:0 (10.5/139.8 GiB) on startup is less than desired "
        "GPU memory utilization (0.9, 125.8 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.",
        ["10.5 of 139.8 GiB", "125.8 GiB", "ERNIE_GPU_MEMORY_UTILIZATION=0.07 or less"],
    ),
    "max_model_len_too_large": (
        "ValueError: To serve at least one request with the model's max seq len (131072), (2.25 GiB "
        "KV cache is needed, which is larger than the available KV cache memory (1.10 GiB). Based on "
        "the available memory, the estimated maximum model length is 64000. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        ["64000", "ERNIE_MAX_MODEL_LEN=64000"],
    ),
    "no_kv_cache_memory": (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        ["ERNIE_GPU_MEMORY_UTILIZATION", "ERNIE_KV_CACHE_GIB"],
    ),
    "max_model_len_above_model_limit": (
        "ValueError: User-specified max_model_len (200000) is greater than the derived max_model_len "
        "(max_position_embeddings=131072 or model_max_length=None in model's config.json).",
        ["200000", "ERNIE_MAX_MODEL_LEN=131072", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"],
    ),
    "model_not_found": (
        "huggingface_hub.errors.HFValidationError: Invalid repository ID or local directory "
        "specified: '/nope'.",
        ["ERNIE_MODEL", "config.json"],
    ),
    "unsupported_architecture": (
        "ValueError: Model architectures ['Ernie4_5_ForCausalLM'] are not supported for now. "
        "Supported architectures: dict_keys(['Ernie4_5ForCausalLM', 'LlamaForCausalLM'])",
        ["['Ernie4_5_ForCausalLM']", "Ernie4_5ForCausalLM"],
    ),
    "port_in_use": (
        "(APIServer pid=1) OSError: [Errno 98] error while attempting to bind on address "
        "('127.0.0.1', 8000): address already in use",
        ["ERNIE_ENGINE_PORT"],
    ),
    "cpu_attention_unsupported": (
        "(EngineCore pid=7) RuntimeError: Unsupported CPU attention configuration",
        ["head_dim", "GPU"],
    ),
    "dp_coordinator_stray_peer": (   # a CPU run of test_data_parallel, 2026-12-01
        "(VLLM_DP_Coordinator pid=3446) ERROR 12-01 22:21:08 [coordinator.py:250] DP Coordinator "
        "received unexpected message while waiting for engines to subscribe",
        ["pgrep -af EngineCore", "ERNIE_DATA_PARALLEL_ADDRESS"],
    ),
    "slow_prefill": (
        "(APIServer pid=1) INFO 11-29 10:05:00 [loggers.py:200] Engine 000: Avg prompt throughput: "
        "50.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 8 reqs, Waiting: 12 reqs, "
        "GPU KV cache usage: 40.0%, Prefix cache hit rate: 0.0%",
        ["50.0 tokens/s", "12 requests waiting", "ERNIE_MAX_NUM_BATCHED_TOKENS"],
    ),
}


def test_every_rule_has_a_case_here():
    assert set(CASES) == {rule.key for rule in RULES}


@pytest.mark.parametrize("key", sorted(CASES))
def test_rule_explains_its_line(key):
    line, expected = CASES[key]
    log = CLEAN_LOG + [line, "(APIServer pid=1) INFO shutting down"]
    findings = diagnose(log)
    assert [f.key for f in findings] == [key]
    finding = findings[0]
    assert finding.line_no == len(CLEAN_LOG) + 1
    assert finding.line == line
    text = f"{finding.title}\n{finding.detail}\n{finding.fix}"
    for fragment in expected:
        assert fragment in text


def test_max_model_len_fix_names_the_estimate():
    finding, = diagnose([CASES["max_model_len_too_large"][0]])
    assert "ERNIE_MAX_MODEL_LEN=64000" in finding.fix


@pytest.mark.parametrize("line", [
    # idle
    "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, "
    "Running: 0 reqs, Waiting: 0 reqs",
    # fast, even with a queue
    "Engine 000: Avg prompt throughput: 5000.0 tokens/s, Avg generation throughput: 900.0 tokens/s, "
    "Running: 64 reqs, Waiting: 12 reqs",
    # slow, but hardly anyone waits
    "Engine 000: Avg prompt throughput: 50.0 tokens/s, Avg generation throughput: 10.0 tokens/s, "
    "Running: 2 reqs, Waiting: 1 reqs",
])
def test_idle_or_fast_prefill_is_not_a_finding(line):
    assert diagnose([line]) == []


def test_clean_log_gives_no_findings():
    assert diagnose(CLEAN_LOG) == []
    assert explain(CLEAN_LOG) is None


def test_each_rule_is_reported_once_at_its_last_occurrence():
    oom = CASES["cuda_oom"][0]
    findings = diagnose([oom, "INFO retry", oom, "INFO end"])
    assert [(f.key, f.line_no) for f in findings] == [("cuda_oom", 3)]


def test_findings_come_in_log_order():
    port, oom = CASES["port_in_use"][0], CASES["cuda_oom"][0]
    assert [f.key for f in diagnose([oom, port])] == ["cuda_oom", "port_in_use"]
    assert [f.key for f in diagnose([port, oom])] == ["port_in_use", "cuda_oom"]


def test_since_last_start_ignores_failures_of_earlier_starts():
    log = [
        f"{START_MARKER} at 2026-11-29 09:00:00",
        CASES["cuda_oom"][0],
        f"{START_MARKER} at 2026-11-29 10:00:00",
        "(APIServer pid=1) INFO vLLM API server version 0.33.0",
        CASES["port_in_use"][0],
    ]
    recent = diagnose(log, since_last_start=True)
    assert [f.key for f in recent] == ["port_in_use"]
    assert recent[0].line_no == 5  # still the line number in the whole file
    assert [f.key for f in diagnose(log)] == ["cuda_oom", "port_in_use"]


def test_since_last_start_without_a_marker_reads_the_whole_log():
    assert [f.key for f in diagnose([CASES["cuda_oom"][0]], since_last_start=True)] == ["cuda_oom"]


def test_render_shows_title_fix_line_number_and_the_line():
    finding, = diagnose(CLEAN_LOG + [CASES["port_in_use"][0]])
    rendered = finding.render()
    assert finding.title in rendered
    assert f"Fix: {finding.fix}" in rendered
    assert f"log line {len(CLEAN_LOG) + 1}" in rendered
    assert "address already in use" in rendered


def test_explain_joins_the_rendered_findings_of_the_last_start():
    log = [CASES["cuda_oom"][0], START_MARKER, CASES["port_in_use"][0]]
    text = explain(log)
    assert "ERNIE_ENGINE_PORT" in text
    assert "CUDA" not in text


# --- last_error_lines ----------------------------------------------------------------

TRACEBACK_LOG = [
    "INFO 11-29 10:00:00 starting",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 700, in run',
    "    engine_core = EngineCoreProc(*args, **kwargs)",
    "ValueError: something the doctor has no rule for",
    "",
    "The above exception was the direct cause of the following exception:",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py", line 9',
    "    raise RuntimeError(...)",
    "RuntimeError: Engine core initialization failed. See root cause above.",
    "[rank0]:[W1129 10:00:05] ProcessGroupNCCL.cpp:1250] WARNING: destroy_process_group() was not called",
    "INFO 11-29 10:00:05 shutting down",
]


def test_last_error_lines_end_at_the_last_python_error():
    shown = last_error_lines(TRACEBACK_LOG, count=4)
    assert shown == TRACEBACK_LOG[7:11]
    assert shown[-1].startswith("RuntimeError: Engine core initialization failed")


def test_last_error_lines_without_an_error_are_the_end_of_the_log():
    assert last_error_lines(CLEAN_LOG, count=3) == CLEAN_LOG[-3:]


def test_last_error_lines_lead_with_the_first_error_another_process_logged():
    coordinator = "(VLLM_DP_Coordinator pid=9) ERROR 11-29 10:00:03 [coordinator.py:250] unexpected message"
    old_start = ["ERROR 11-28 09:00:00 [core.py:1] a failure of an earlier start", START_MARKER]
    shown = last_error_lines(old_start + TRACEBACK_LOG[:5] + [coordinator] + TRACEBACK_LOG[5:], count=4)
    assert shown[:2] == [coordinator, "..."]
    assert shown[-1].startswith("RuntimeError: Engine core initialization failed")
