"""What `up` asks vLLM to group per streamed event when ERNIE_STREAM_INTERVAL is unset
(server/plan/stream_interval.py): eight tokens on a GPU whose vLLM cannot group per request."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from server.plan.stream_interval import AUTO_INTERVAL, auto_interval, choose, installed_vllm, parse_version
from server.settings import load_settings
from server.stack.engine_args import EngineCopy, engine_command
from server.stack.engine_tier import EngineTier
from server.stack import rolling
from server.stack.app_tier import AppTier
from server.stack.restart_control import settings_from, settings_values


def test_versions_are_read_as_major_and_minor():
    assert parse_version("0.26.0") == (0, 26)
    assert parse_version("0.33.1+cu130\n") == (0, 33)
    assert parse_version("1.2") == (1, 2)
    assert [parse_version(v) for v in ("", "dev", "0", "x.1")] == [None] * 4


def test_a_gpu_with_an_older_vllm_groups_eight_and_says_how_to_change_it():
    choice = auto_interval("cuda", (0, 26))
    assert choice.interval == AUTO_INTERVAL == 8
    assert "vLLM 0.26" in choice.reason and "ERNIE_STREAM_INTERVAL" in choice.reason


def test_vllm_that_groups_per_request_a_cpu_or_an_unknown_version_keep_vllms_default():
    for device, version in (("cuda", (0, 32)), ("cuda", (0, 33)), ("cuda", (1, 0)), ("cpu", (0, 26)),
                            ("cuda", None)):
        assert auto_interval(device, version).interval is None, (device, version)
        assert auto_interval(device, version).reason is None


def fake_python(tmp_path, version: str | None):
    """An interpreter that sees a vLLM distribution of ``version`` (its metadata only)."""
    site = tmp_path / "site"
    if version:
        info = site / f"vllm-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_the_installed_version_is_read_from_the_engines_python(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    python = fake_python(tmp_path, "0.26.0")
    assert installed_vllm(python) == (0, 26)
    assert choose("cuda", python).interval == 8
    assert choose("cpu", python).interval is None


def test_no_vllm_or_no_python_is_not_a_version(tmp_path):
    assert installed_vllm(fake_python(tmp_path, None)) is None
    assert installed_vllm(tmp_path / "missing-python") is None
    assert choose("cuda", os.devnull).interval is None


def test_the_engine_tier_groups_once_and_keeps_the_users_own_interval(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("ERNIE_STREAM_INTERVAL", raising=False)
    said: list[str] = []
    tier = EngineTier(load_settings(), (EngineCopy("127.0.0.1", 41000, api_servers=2),), "cuda", Path("."),
                      Path("llm.log"), out=said.append)
    tier.python = str(fake_python(tmp_path, "0.26.0"))
    grouped = tier.grouped(tier.settings)
    argv = engine_command(grouped, "MODEL", "cuda", "python").argv
    assert argv[argv.index("--stream-interval") + 1] == "8"
    assert tier.grouped(tier.settings).stream_interval == 8  # a rolling restart's commands too
    assert len(said) == 1 and said[0].startswith("[engine] vLLM 0.26 groups no tokens per request")
    own = load_settings(stream_interval=2)
    assert tier.grouped(own).stream_interval == 2


def test_the_app_asks_for_no_interval_an_engine_already_groups_even_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.delenv("ERNIE_STREAM_INTERVAL_MAX", raising=False)

    def worker_env(settings, engine_groups):
        tier = AppTier(settings, "127.0.0.1", (8081,), "http://127.0.0.1:8000", Path("."),
                       tmp_path / "llm.log", engine_groups=engine_groups)
        return tier.workers[0].proc.env

    up = load_settings()
    # vLLM 0.32+: the app asks per request, up to the default.
    assert "ERNIE_STREAM_INTERVAL_MAX" not in worker_env(up, False) and up.interval_max == 16
    assert worker_env(up, True)["ERNIE_STREAM_INTERVAL_MAX"] == "1"  # an older vLLM groups itself
    # `restart` sends every field's value: unset stays unset, and is no change to apply.
    restart = settings_from(settings_values(up))
    assert rolling.changed(up, restart) == []
    assert worker_env(restart, True)["ERNIE_STREAM_INTERVAL_MAX"] == "1"
    own = load_settings(stream_interval_max=4)
    assert worker_env(own, True)["ERNIE_STREAM_INTERVAL_MAX"] == "4" and own.interval_max == 4


def test_tune_runs_a_point_that_sets_no_interval_as_up_would(monkeypatch):
    monkeypatch.delenv("ERNIE_STREAM_INTERVAL", raising=False)
    from server.loadtest.lib.config import BenchConfig
    from server.loadtest.sweep import tune
    from server.loadtest.sweep.choice import Outcome, Point
    sweep_ = tune.Sweep(load_settings(), "MODEL", "cuda", Path("python"), "", BenchConfig(url="http://x"),
                        Path("."), 60, 0, interval=auto_interval("cuda", (0, 26)))
    assert tune.point_settings(sweep_, Outcome(Point.of(max_model_len=2048))).stream_interval == 8
    own = Outcome(Point.of(max_model_len=2048, stream_interval=1))
    assert tune.point_settings(sweep_, own).stream_interval == 1
    assert sweep_.header()["auto_stream_interval"] == 8
