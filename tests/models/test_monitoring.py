"""A real Prometheus scraping `up` with two models: the dashboard's vLLM panels show each."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from server.settings import Settings
from tests.support.stack_process import Up
from tests.support.ports import free_ports
from tests.support.prometheus import (
    assert_vllm_panels_show_each_model, drawn, scraped_by_prometheus, vllm_queries)


@pytest.fixture
def two_models_monitored(demo_model, tmp_path):
    """`up` with ERNIE_MODELS: two real vLLMs, each its own target of the scrape config."""
    models, port = "demo,demo-small", free_ports(2)
    up = Up(tmp_path / "stack", ERNIE_MODELS=models, ERNIE_MODEL=None, ERNIE_KV_CACHE_GIB=None,
            ERNIE_ENGINE_PORT=str(port), ERNIE_WARMUP="false")
    yield from scraped_by_prometheus(up, Settings(_env_file=None, models=models, engine_port=port,
                                                  kv_cache_gib=None, metrics_port=up.metrics_port), tmp_path)


def test_with_two_models_the_vllm_panels_show_each_and_the_model_chosen(two_models_monitored):
    up, prom, served = two_models_monitored
    assert served == ["demo", "demo-small"]
    prom.reaches('sum(up{job="ernie-chat-vllm"})', 2)
    port = int(up.env["ERNIE_ENGINE_PORT"])
    for at, name in enumerate(served):  # each engine answers a request of its own: figures of its own
        reply = httpx.post(f"http://127.0.0.1:{port + at}/v1/chat/completions", timeout=120, json={
            "model": name, "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]})
        assert reply.status_code == 200, reply.text
    assert_vllm_panels_show_each_model(prom, served)
    # Drawn for one model chosen: each vLLM query draws its series alone, one fewer than for All.
    folder = Path(up.settings.log_file).parent
    _, every = drawn(prom, folder / "all.png")
    _, one = drawn(prom, folder / "demo-small.png", "--model", "demo-small")
    assert every - one == len(vllm_queries()), (every, one)
