"""The app's own metrics, every worker's added up, scraped by a real Prometheus.

The unit tests run the endpoint on real workers' files (a process that counted, then
exited); the stack test runs ``up`` with two app workers behind HAProxy on the session's
vLLM, chats through them as browsers do, and asks Debian's Prometheus (``./scripts/test``
installs it) what it scraped with the repository's scrape config and dashboard. With
ERNIE_MODELS, ``up`` runs two real vLLMs and the dashboard's vLLM panels are asked for each model
through its ``model`` variable.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server.settings import SettingsError, load_settings
from server.stack import dashboard as dashboard_file
from server.stack import metrics_endpoint, scrape_config
from server.stack.engine_tier import StartupFailed
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from tests.support.metrics import metric_from_text
from tests.support.prometheus import AGGREGATION, VLLM_SELECTOR, vllm_queries

TOKEN = "t0ken-for-the-metrics-endpoint"


def count_in_a_worker(folder: Path, code: str) -> None:
    """``code`` run against app.chat_metrics in a worker-like process that then exits."""
    subprocess.run([sys.executable, "-c", f"from app import chat_metrics as metrics\n{code}"], check=True, timeout=60,
                   env={"PROMETHEUS_MULTIPROC_DIR": str(folder), "PATH": "/usr/bin:/bin"},
                   cwd=Path(__file__).resolve().parents[2])


@pytest.fixture
def endpoint(tmp_path):
    settings = load_settings(log_file=tmp_path / "llm.log", metrics_port=free_port(), metrics_token=TOKEN)
    served = metrics_endpoint.MetricsEndpoint(settings)
    yield served, f"http://127.0.0.1:{settings.metrics_port}/metrics"
    served.stop()


def test_workers_figures_are_added_up_and_a_gone_workers_chats_are_not_open(endpoint):
    served, url = endpoint
    count_in_a_worker(served.path, "metrics.chat_opened(); metrics.chat_opened(); metrics.message_received()\n"
                                   "metrics.error_shown('cut'); metrics.limit_hit('messages')")
    count_in_a_worker(served.path, "metrics.chat_opened(); metrics.message_received()")
    body = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert metric_from_text(body, "ernie_chat_messages_total") == 2  # both workers, after they exited
    assert metric_from_text(body, "ernie_chat_errors_total", kind="cut") == 1
    assert metric_from_text(body, "ernie_chat_limits_hit_total", limit="messages") == 1
    # Their three chats went with them: a dead worker's gauge is dropped, not summed forever.
    with pytest.raises(KeyError):
        metric_from_text(body, "ernie_chat_chats_open")


def test_a_sign_in_the_provider_vouched_for_but_the_rules_refuse_is_counted(endpoint):
    served, url = endpoint
    count_in_a_worker(served.path, "import asyncio\nfrom app.auth import oidc\n"
                      "rules = oidc.Rules('email', 'groups', ('example.org',), (), None, frozenset())\n"
                      "on_oauth = oidc.make_callback(rules, None, 'idp')\n"
                      "claims = {'email': 'eve@elsewhere.net', 'email_verified': True}\n"
                      "assert asyncio.run(on_oauth('idp', 'token', claims, None)) is None")
    body = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert metric_from_text(body, "ernie_chat_logins_failed_total", reason="provider_refused") == 1


def test_the_folder_of_a_previous_run_is_emptied(tmp_path):
    folder = tmp_path / "app-metrics"
    count_in_a_worker(metrics_endpoint.prepare_dir(folder), "metrics.message_received()")
    assert list(folder.glob("*.db"))
    assert not list(metrics_endpoint.prepare_dir(folder).iterdir())
    assert folder.stat().st_mode & 0o777 == 0o700


def test_without_the_token_the_endpoint_answers_401(endpoint):
    _, url = endpoint
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


@pytest.mark.usefixtures("clean_env")
def test_an_exposed_endpoint_without_a_token_is_refused_with_what_to_set():
    with pytest.raises(SettingsError, match="ERNIE_METRICS_TOKEN"):
        load_settings(metrics_host="0.0.0.0")
    with pytest.raises(SettingsError, match="shorter than 16"):
        load_settings(metrics_token="short")
    assert load_settings(metrics_host="0.0.0.0", metrics_token=TOKEN).metrics_token_value == TOKEN
    load_settings(metrics_host="0.0.0.0", metrics_port=0)  # no endpoint: nothing exposed


@pytest.mark.usefixtures("clean_env")
def test_the_scrape_config_points_at_both_endpoints_with_token_files_not_tokens(tmp_path):
    settings = load_settings(metrics_host="0.0.0.0", metrics_port=9999, metrics_token=TOKEN,
                             api_key="sk-" + "k" * 20, engine_port=8123)
    text = scrape_config.render_for(settings, tmp_path)
    assert '"127.0.0.1:9999"' in text and '"127.0.0.1:8123"' in text
    assert str(scrape_config.APP_TOKEN_FILE) in text and str(scrape_config.ENGINE_KEY_FILE) in text
    assert TOKEN not in text and "kkkk" not in text
    assert "authorization" not in scrape_config.render_for(load_settings(), tmp_path)


@pytest.mark.usefixtures("clean_env")
def test_the_scrape_config_lists_every_models_engine_labelled_with_its_served_name(tmp_path):
    settings = load_settings(models="baidu/ERNIE-4.5-0.3B-PT,demo-small", engine_port=8200,
                             kv_cache_gib=None, engine_host="0.0.0.0")
    text = scrape_config.render_for(settings, tmp_path)
    vllm = text[text.index("job_name: ernie-chat-vllm"):]
    assert vllm.count("- targets:") == 2
    assert ('- targets: ["127.0.0.1:8200"]\n        labels:\n          model: "ERNIE-4.5-0.3B-PT"\n'
            '      - targets: ["127.0.0.1:8201"]\n        labels:\n          model: "demo-small"\n') in vllm
    # One model alone: its one target, labelled with its served name all the same.
    alone = scrape_config.render_for(load_settings(engine_port=8123), tmp_path)
    assert alone.count("- targets:") == 2  # the app's and the engine's
    assert f'"127.0.0.1:8123"]\n        labels:\n          model: "{load_settings().served_model_name}"' in alone


def test_every_vllm_query_filters_by_the_model_variable_and_keeps_one_series_per_model():
    targets = [target for panel in dashboard_file.load()["panels"] for target in panel["targets"]]
    vllm = [target for target in targets if "vllm:" in target["expr"]]
    assert len(vllm) >= 8
    for target in vllm:
        expr = target["expr"]
        assert {m.group(1) for m in VLLM_SELECTOR.finditer(expr)} == {'{model=~"$model"}'}, expr
        assert all("model" in (m.group(1) or "") for m in AGGREGATION.finditer(expr)), expr
        assert "{{model}}" in target["legendFormat"], target
    assert not any("$model" in target["expr"] for target in targets if target not in vllm)


def test_the_model_variable_is_every_engines_model_and_all_matches_any_model():
    variable = dashboard_file.variable(dashboard_file.load())
    assert variable["query"] == "label_values(vllm:num_requests_running, model)"
    assert variable["multi"] and variable["includeAll"]
    # All as ".*", not Grafana's default (a|b) of the names it found: a stack scraped without
    # the label (a Prometheus configured by hand) still shows its engine.
    assert variable["allValue"] == ".*"


def test_a_chosen_model_is_filled_in_as_grafanas_prometheus_source_escapes_it():
    dashboard = dashboard_file.load()
    assert dashboard_file.model_value(dashboard) == ".*"
    one = dashboard_file.model_value(dashboard, ["ernie-4.5-0.3b"])
    assert one == "ernie-4\\\\.5-0\\\\.3b"
    assert dashboard_file.model_value(dashboard, ["demo", "ernie-4.5-0.3b"]) == f"(demo|{one})"
    # The PromQL string's escapes undone: a regex for the name alone, its dots no wildcards.
    pattern = one.replace("\\\\", "\\")
    assert re.fullmatch(pattern, "ernie-4.5-0.3b") and not re.fullmatch(pattern, "ernie-4x5-0x3b")
    assert dashboard_file.model_value(dashboard, ["a\\b|c"]) == "a\\\\\\\\b\\\\|c"
    assert all('{model=~"demo"}' in target["expr"] for target in vllm_queries(["demo"]))


def test_a_taken_metrics_port_stops_up_before_anything_starts_and_says_which(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings = load_settings(engine_port=free_port(), app_port=free_port(), metrics_port=port,
                                 log_file=tmp_path / "llm.log")
        with pytest.raises(StartupFailed, match=f"Port {port} .*ERNIE_METRICS_PORT"):
            Stack(settings, root=tmp_path, out=lambda _: None).check_before_start()
