"""ERNIE_MODELS outside vLLM: each model's engine settings and log (server/stack/model_tiers.py),
the set's check before `up` starts anything (server/plan/models.py ``fit``), and the load
tools' --model (server/loadtest/lib/load_args.py)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from server.cli import build_parser, main
from server.errors import LoadTestError
from server.loadtest.lib.load_args import chat_profile, engine_config, served_model
from server.plan import models
from server.plan.device import DeviceMemory
from server.plan.model_config import load_shape
from server.settings import Settings, load_settings
from server.settings.model_list import ModelEntry
from server.stack import model_tiers
from server.stack.app_tier import AppTier
from server.stack.engine_args import engine_command
from server.stack.engine_tier import StartupFailed
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from server.stack.topology import balancer_config

pytestmark = pytest.mark.usefixtures("clean_env")

GIB = 1024**3
ERNIE = "baidu/ERNIE-4.5-0.3B-PT"
MODELS = f"{ERNIE}:8192:0.3,/models/other:2048"
H200 = DeviceMemory("cuda", "H200", int(140.4 * GIB), int(140.4 * GIB))


def several(**overrides) -> Settings:
    return Settings(_env_file=None, **{"models": MODELS, "engine_port": 9000, **overrides})


def test_a_model_is_found_by_its_served_name_or_its_name_in_the_settings():
    s = several()
    assert served_model(s, "other").port == served_model(s, "/models/other").port == 9001
    assert served_model(s, "ERNIE-4.5-0.3B-PT").base_url == "http://127.0.0.1:9000"
    assert served_model(s, None).served_name == "ERNIE-4.5-0.3B-PT"  # the first by default


def test_an_unknown_model_is_refused_with_the_served_names():
    with pytest.raises(LoadTestError) as refused:
        served_model(several(), "ernie-4.5-0.3b")
    assert "'ernie-4.5-0.3b' is not served here" in str(refused.value)
    assert "ERNIE-4.5-0.3B-PT, other" in str(refused.value)
    assert "put ERNIE_MODELS in .env" in str(refused.value)
    with pytest.raises(LoadTestError, match="ernie-4.5-0.3b"):  # one model: its name only
        served_model(Settings(_env_file=None), "other")


def test_the_chat_profile_is_the_served_name_only_where_the_app_offers_several():
    assert chat_profile(several(), "/models/other") == "other"
    assert chat_profile(several(), None) == ""
    assert chat_profile(Settings(_env_file=None), "ernie-4.5-0.3b") == ""


def test_bench_model_loads_that_models_engine(monkeypatch):
    monkeypatch.setenv("ERNIE_MODELS", MODELS)
    monkeypatch.setenv("ERNIE_ENGINE_PORT", "9000")
    _, cfg = engine_config(build_parser().parse_args(["bench", "--model", "other"]))
    assert (cfg.url, cfg.model) == ("http://127.0.0.1:9001", "other")
    # --url names another server: --model goes to it as written.
    _, cfg = engine_config(build_parser().parse_args(
        ["bench", "--url", "http://127.0.0.1:7000", "--model", "x"]))
    assert (cfg.url, cfg.model) == ("http://127.0.0.1:7000", "x")


@pytest.mark.parametrize("command", [["bench"], ["capacity", "--through", "engine"],
                                     ["capacity"], ["qa-load"]])
def test_each_load_tool_refuses_an_unknown_model_before_sending(monkeypatch, capsys, command):
    monkeypatch.setenv("ERNIE_MODELS", MODELS)
    assert main([*command, "--model", "nope"]) == 2
    assert "the served names are ERNIE-4.5-0.3B-PT, other" in capsys.readouterr().err


def test_each_model_gets_its_own_vllm_command_and_log():
    s = several()
    other = s.served_models[1]
    tier = model_tiers.tier_settings(s, other, 0.25)
    argv = engine_command(tier, "/models/other", "cuda", "python").argv
    for flag, value in (("--served-model-name", "other"), ("--port", "9001"),
                        ("--max-model-len", "2048"), ("--gpu-memory-utilization", "0.25")):
        assert argv[argv.index(flag) + 1] == value
    assert "--kv-cache-memory-bytes" not in argv  # the share sizes the pool
    cpu = engine_command(model_tiers.tier_settings(s, other, None), "/models/other", "cpu", "python").argv
    assert int(cpu[cpu.index("--kv-cache-memory-bytes") + 1]) == GIB  # one model's pool alone
    assert model_tiers.model_log_path(Path("/l/llm.log"), "other") == Path("/l/llm-other.log")
    assert model_tiers.unplanned_shares(s) == (0.3, 0.6)


def test_a_set_too_big_for_the_gpu_is_refused_with_the_plans_figures():
    shape = load_shape(ERNIE)[0]
    shares, problems = models.fit(several(), [(ModelEntry(ERNIE, 8192, 0.3), shape),
                                              (ModelEntry("/models/other", 2048), shape)], H200)
    assert shares[0] == 0.3 and not problems
    small = DeviceMemory("cuda", "small", 2 * GIB, 2 * GIB)
    _, problems = models.fit(several(), [(ModelEntry(ERNIE, 8192, 0.3), shape),
                                         (ModelEntry("/models/other", 2048), shape)], small)
    assert any("short by" in p and "GiB" in p for p in problems), problems


def test_a_set_too_big_for_the_cpu_is_refused_with_the_figures():
    shape = load_shape(ERNIE)[0]
    entries = [(ModelEntry(ERNIE, 8192), shape), (ModelEntry("/models/other", 2048), shape)]
    shares, problems = models.fit(several(), entries, DeviceMemory("cpu", "RAM", 8 * GIB, 8 * GIB))
    assert shares == (None, None) and not problems
    _, problems = models.fit(several(), entries, DeviceMemory("cpu", "RAM", 8 * GIB, int(1.5 * GIB)))
    assert problems == ["The models' KV pools add up to 2.00 GiB, but only 1.50 GiB of memory are "
                        "free: short by 0.50 GiB. Serve fewer models (or fewer at once: "
                        "ERNIE_MODELS_AT_ONCE=N starts the others on demand; `ernie-chat plan "
                        "--at-once N` shows that plan), or stop other programs."]
    _, problems = models.fit(several(), [(ModelEntry(ERNIE, 10**6), shape)], DeviceMemory(
        "cpu", "RAM", 8 * GIB, 8 * GIB))
    assert problems and problems[0].startswith(f"{ERNIE}: ") and "max_position_embeddings" in problems[0]


def test_an_exposed_engine_with_several_models_starts_each_behind_haproxy():
    port = free_port(2)
    # Its own free ports for the chat and its metrics too: the check refuses any port in use, and an
    # `up` on this machine holds the default ones.
    stack = Stack(several(engine_host="0.0.0.0", api_key="sk-x", engine_port=port, app_port=free_port(),
                          metrics_port=free_port()), out=lambda line: None)
    stack.check_before_start()   # each model's port is HAProxy's, guarded: nothing to refuse
    assert stack.topology.needs_balancer
    assert [(f.bind_port, f.keyed) for f in balancer_config(stack.topology, stack.settings).frontends] == [
        (port, True), (port + 1, True)]
    with socket.socket() as taken:   # what still cannot work is refused, with the setting to change
        taken.bind(("0.0.0.0", port + 1))
        taken.listen()
        with pytest.raises(StartupFailed, match=r"ERNIE_ENGINE_PORT\+1 \(model other of ERNIE_MODELS\)"):
            stack.check_before_start()


def test_the_app_workers_load_the_same_models(tmp_path, monkeypatch):
    s = several()
    apps = AppTier(s, "127.0.0.1", (8000,), "http://127.0.0.1:9000", tmp_path, tmp_path / "llm.log")
    env = apps.workers[0].proc.env
    assert env["ERNIE_MODELS"] == MODELS and "ERNIE_ENGINE_URL" not in env
    for name, value in env.items():  # as the worker reads them (an engine URL would be refused)
        if name.startswith("ERNIE_"):
            monkeypatch.setenv(name, value)
    assert load_settings().served_models == s.served_models


def test_settings_shows_each_models_vllm_command(monkeypatch, capsys):
    monkeypatch.setenv("ERNIE_MODELS", MODELS)
    monkeypatch.setenv("ERNIE_ENGINE_PORT", "9000")
    monkeypatch.setenv("ERNIE_DEVICE", "cpu")
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    assert "vLLM command of other on cpu:\n  python -m server.stack.vllm_serve /models/other " \
           "--served-model-name other --host 127.0.0.1 --port 9001 --max-model-len 2048" in out
    assert "--served-model-name ERNIE-4.5-0.3B-PT --host 127.0.0.1 --port 9000 --max-model-len 8192" in out


def test_settings_shows_the_loopback_ports_of_exposed_models(monkeypatch, capsys):
    for name, value in (("ERNIE_MODELS", MODELS), ("ERNIE_ENGINE_PORT", "9000"), ("ERNIE_DEVICE", "cpu"),
                        ("ERNIE_ENGINE_HOST", "0.0.0.0")):
        monkeypatch.setenv(name, value)
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    listens = re.findall(r"--served-model-name (\S+) --host (\S+) --port (\d+)", out)
    assert [(name, host) for name, host, _ in listens] == [("ERNIE-4.5-0.3B-PT", "127.0.0.1"),
                                                           ("other", "127.0.0.1")]
    assert not {port for _, _, port in listens} & {"9000", "9001"}   # those are HAProxy's
    assert "HAProxy listens on each model's port of 0.0.0.0 and asks for the API key" in out
