"""server/stack/vllm_log.py: the KV cache figures vLLM prints, in every format it uses."""

from __future__ import annotations

import pytest

from server.stack.vllm_log import KVReport, parse_kv_report, read_tail

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
