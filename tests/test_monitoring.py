"""The app's own metrics, every worker's added up, scraped by a real Prometheus.

The unit tests run the endpoint on real workers' files (a process that counted, then
exited); the stack test runs ``up`` with two app workers behind HAProxy on the session's
vLLM, chats through them as browsers do, and asks Debian's Prometheus (``./scripts/test``
installs it) what it scraped with the repository's scrape config and dashboard. With
ERNIE_MODELS, ``up`` runs two real vLLMs and the dashboard's vLLM panels are asked for each model
through its ``model`` variable.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx
import pytest

from server.loadtest.chat import qa_load
from server.loadtest.lib import login as qa_login
from server.settings import Settings, SettingsError, load_settings
from server.stack import dashboard as dashboard_file
from server.stack import metrics_endpoint, scrape_config
from server.stack.engine_tier import StartupFailed
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from tests.conftest import metric_from_text
from tests.stack_process import Up
from tests.test_models_serve import free_ports

TOKEN = "t0ken-for-the-metrics-endpoint"


def count_in_a_worker(folder: Path, code: str) -> None:
    """``code`` run against app.chat_metrics in a worker-like process that then exits."""
    subprocess.run([sys.executable, "-c", f"from app import chat_metrics as metrics\n{code}"], check=True, timeout=60,
                   env={"PROMETHEUS_MULTIPROC_DIR": str(folder), "PATH": "/usr/bin:/bin"},
                   cwd=Path(__file__).resolve().parent.parent)


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


VLLM_SELECTOR = re.compile(r"vllm:\w+(\{[^}]*\})?")
AGGREGATION = re.compile(r"\b(?:sum|max|min|avg) (?:by \(([^)]*)\) )?\(")


def vllm_queries(models: Optional[list[str]] = None) -> list[dict]:
    """The vLLM panels' targets, ``$model`` filled in as Grafana does for ``models`` (None: All)."""
    shown = dashboard_file.with_models(dashboard_file.load(), models)
    return [target for panel in shown["panels"] for target in panel["targets"] if "vllm:" in target["expr"]]


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


# --- a real stack, a real Prometheus ---------------------------------------------------

CHATS = 4
REPLY_TOKENS = 24
PASSWORD = "wonderland-rabbit"


class Prometheus:
    def __init__(self, tmp: Path, config: str):
        binary = shutil.which("prometheus") or "/usr/bin/prometheus"
        if not Path(binary).exists():
            raise RuntimeError("Prometheus is not installed: apt-get install prometheus "
                               "(./scripts/test does it)")
        (tmp / "prometheus.yml").write_text(config)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_for(lambda: httpx.get(self.url + "/-/ready").status_code == 200, "ready")

    def wait_for(self, check, what: str, timeout_s: float = 60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"Prometheus exited: {Path(self.log.name).read_text()[-2000:]}"
            try:
                if check():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"Prometheus: not {what} in {timeout_s} s")

    def query(self, promql: str) -> dict:
        answer = httpx.get(self.url + "/api/v1/query", params={"query": promql}, timeout=10).json()
        assert answer["status"] == "success", (promql, answer)
        return answer["data"]

    def value(self, promql: str):
        """The single value of an instant query, None when it has no series."""
        result = self.query(promql)["result"]
        return float(result[0]["value"][1]) if result else None

    def reaches(self, promql: str, wanted: float, timeout_s: float = 30) -> None:
        self.wait_for(lambda: self.value(promql) == wanted, f"{promql} == {wanted} "
                      f"(last: {self.value(promql)})", timeout_s)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()

    def label_values(self, label: str, metric: str) -> list[str]:
        """Grafana's ``label_values(metric, label)``, as its Prometheus source asks for it."""
        answer = httpx.get(f"{self.url}/api/v1/label/{label}/values", params={"match[]": metric},
                           timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]


def scraped_by_prometheus(up: Up, scraped: Settings, tmp: Path):
    """``up`` once it serves, with Prometheus scraping it every second with the repository's
    scrape config for ``scraped``; yields (up, Prometheus, the served names); stops both."""
    prometheus = None
    try:
        up.wait_for("Press Ctrl-C", timeout_s=900)
        prometheus = Prometheus(tmp, scrape_config.render(scraped, interval_s=1))
        yield up, prometheus, [model.served_name for model in scraped.served_models]
    finally:
        if prometheus:
            prometheus.stop()
        up.stop()


@pytest.fixture
def monitored(engine, tmp_path):
    """One model: the session's engine."""
    settings, _ = engine
    up = Up(tmp_path / "stack", ERNIE_ENGINE_URL=settings.engine_base_url, ERNIE_APP_WORKERS="2",
            ERNIE_USERS=f"alice:{PASSWORD}", ERNIE_MAX_TOKENS=str(REPLY_TOKENS), ERNIE_IGNORE_EOS="true",
            ERNIE_WARMUP="false", ERNIE_MAX_MODEL_LEN=str(settings.max_model_len))
    yield from scraped_by_prometheus(up, Settings(_env_file=None, metrics_port=up.metrics_port,
                                                  engine_url=settings.engine_base_url), tmp_path)


@pytest.fixture
def two_models_monitored(demo_model, tmp_path):
    """`up` with ERNIE_MODELS: two real vLLMs, each its own target of the scrape config."""
    models, port = "demo,demo-small", free_ports(2)
    up = Up(tmp_path / "stack", ERNIE_MODELS=models, ERNIE_MODEL=None, ERNIE_KV_CACHE_GIB=None,
            ERNIE_ENGINE_PORT=str(port), ERNIE_WARMUP="false")
    yield from scraped_by_prometheus(up, Settings(_env_file=None, models=models, engine_port=port,
                                                  kv_cache_gib=None, metrics_port=up.metrics_port), tmp_path)


def models_shown(prom: Prometheus, expr: str) -> list[Optional[str]]:
    """The ``model`` of each series the query answers with a figure (NaN: none yet)."""
    return sorted((r["metric"].get("model") for r in prom.query(expr)["result"] if r["value"][1] != "NaN"),
                  key=str)


def drawn(prom: Prometheus, png: Path, *args: str) -> tuple[int, int]:
    """benchmarks/monitoring/dashboard_png.py's picture of the last 3 minutes: (panels, series)."""
    done = subprocess.run([sys.executable, "benchmarks/monitoring/dashboard_png.py", "--prometheus", prom.url,
                           "--minutes", "3", "--out", str(png), *args], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    panels, series = (int(w) for w in done.stdout.split(": ")[1].split()[::2])
    return panels, series


def assert_vllm_panels_show_each_model(prom: Prometheus, served: list[str]) -> None:
    """Every vLLM query of the dashboard, ``$model`` filled in as Grafana does: All, all the
    names and each name alone show one series per chosen model; a name no engine serves, or
    one the chosen name's regex would match unescaped, shows nothing."""
    metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)",
                                 dashboard_file.variable(dashboard_file.load())["query"]).groups()
    assert sorted(prom.label_values(label, metric)) == sorted(served)
    for chosen, expected in [(None, served), (served, served), *(([name], [name]) for name in served)]:
        for target in vllm_queries(chosen):
            deadline = time.monotonic() + 30  # a rate needs two scrapes after the requests
            while (shown := models_shown(prom, target["expr"])) != sorted(expected):
                assert time.monotonic() < deadline, (chosen, target["expr"], shown)
                time.sleep(0.5)
    for other in ["another-model", *(name[:-1] + "." for name in served)]:
        for target in vllm_queries([other]):
            assert prom.query(target["expr"])["result"] == [], target["expr"]


@pytest.mark.engine
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


@pytest.mark.engine
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
