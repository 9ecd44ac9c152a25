"""A real Prometheus scraping `up` (two app workers behind HAProxy on the session's vLLM): the
app's figures and vLLM's, and the dashboard's queries."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from server.loadtest.chat import qa_load
from server.loadtest.lib import login as qa_login
from server.settings import Settings, load_settings
from server.stack import dashboard as dashboard_file
from server.stack import metrics_endpoint
from tests.support.stack_process import Up
from tests.support.prometheus import assert_vllm_panels_show_each_model, drawn, scraped_by_prometheus


# --- a real stack, a real Prometheus ---------------------------------------------------

CHATS = 4
REPLY_TOKENS = 24
PASSWORD = "wonderland-rabbit"


@pytest.fixture
def monitored(engine, tmp_path):
    """One model: the session's engine."""
    settings, _ = engine
    up = Up(tmp_path / "stack", ERNIE_ENGINE_URL=settings.engine_base_url, ERNIE_APP_WORKERS="2",
            ERNIE_USERS=f"alice:{PASSWORD}", ERNIE_MAX_TOKENS=str(REPLY_TOKENS), ERNIE_IGNORE_EOS="true",
            ERNIE_WARMUP="false", ERNIE_MAX_MODEL_LEN=str(settings.max_model_len))
    yield from scraped_by_prometheus(up, Settings(_env_file=None, metrics_port=up.metrics_port,
                                                  engine_url=settings.engine_base_url), tmp_path)


def test_prometheus_scrapes_the_apps_and_vllms_figures_and_the_dashboard_queries_parse(monitored):
    up, prom, served = monitored
    prom.reaches('sum(up{job=~"ernie-chat-app|ernie-chat-vllm"})', 2)
    for _ in range(2):
        assert httpx.post(up.url + "/login", data={"username": "alice", "password": "wrong"}).status_code == 401
    cookie = asyncio.run(qa_login.log_in(up.url, "alice", {qa_login.PASSWORD_ENV: PASSWORD}))

    async def all_open():  # the chats are open, none has asked yet
        await asyncio.to_thread(prom.reaches, "sum(ernie_chat_chats_open)", CHATS)
    result = asyncio.run(qa_load.run_load(up.url, ["Tell me a story."], CHATS, 120,
                                          before_sending=all_open, cookie=cookie))
    assert result["summary"]["complete"] == CHATS, result["summary"]
    # A prompt far over the window: the chat refuses it before the engine, an error of its kind.
    too_long = asyncio.run(qa_load.run_load(up.url, ["word " * 20000], 1, 120, cookie=cookie))
    assert too_long["summary"]["complete"] == 0

    prom.reaches("sum(ernie_chat_messages_total)", CHATS + 1)
    prom.reaches("sum(ernie_chat_replies_total)", CHATS)
    prom.reaches("sum(ernie_chat_time_to_first_token_seconds_count)", CHATS)
    prom.reaches("sum(ernie_chat_reply_tokens_per_second_count)", CHATS)
    prom.reaches('sum(ernie_chat_errors_total{kind="too_long"})', 1)
    prom.reaches('sum(ernie_chat_logins_failed_total{reason="password"})', 2)
    prom.reaches("sum(ernie_chat_chats_open)", 0)  # the clients left
    # The chats reached both workers, and the one endpoint added them up.
    folder = metrics_endpoint.metrics_dir(load_settings(log_file=up.settings.log_file))
    assert len(metrics_endpoint.pids_of(p.name for p in folder.glob("counter_*.db"))) == 2
    # What the users waited for, against what the replies' own timing allows: the demo model
    # on a CPU answers within seconds, 24 tokens each.
    p95 = prom.value("histogram_quantile(0.95, sum by (le) (ernie_chat_time_to_first_token_seconds_bucket))")
    assert 0 < p95 <= 30
    assert prom.value("sum(vllm:generation_tokens_total)") >= CHATS * REPLY_TOKENS
    assert prom.value("sum(vllm:num_requests_running)") is not None
    assert prom.value("max(vllm:kv_cache_usage_perc)") is not None

    assert_vllm_panels_show_each_model(prom, served)
    dashboard = dashboard_file.with_models(dashboard_file.load())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 12
    for expr in exprs:  # each parses and runs: Prometheus answers "success"
        prom.query(expr)
    names = " ".join(exprs)
    for wanted in ("ernie_chat_time_to_first_token_seconds", "ernie_chat_reply_tokens_per_second",
                   "ernie_chat_chats_open", "ernie_chat_errors_total", "vllm:num_requests_running",
                   "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert wanted in names, wanted
    # Drawn without Grafana (benchmarks/monitoring/dashboard_png.py): every panel, with data.
    panels, series = drawn(prom, Path(up.settings.log_file).parent / "dashboard.png")
    assert panels == len(dashboard["panels"]) and series >= 10
