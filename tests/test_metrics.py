"""server/metrics.py on a /metrics excerpt shaped like vLLM 0.32's."""

from server.metrics import parse_metrics

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
    assert "25.0% used of 16,000 tokens" in m.summary() and "150 ms" in m.summary()


def test_missing_series_read_as_zero():
    m = parse_metrics("")
    assert (m.running, m.waiting, m.preemptions, m.kv_cache_tokens, m.ttft_avg_s) == (0, 0, 0, None, None)
