"""server/stack/model_source.py: which model the engine serves, without touching the network."""

from __future__ import annotations

import os
import socket

import pytest

from server.plan.model_config import hub_cache_dir
from server.settings import load_settings
from server.stack.model_source import choose_model, hub_reachable, in_hub_cache

HUB_ID = "org/name"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No ERNIE_* settings and an empty hub cache, whatever the developer's machine has."""
    for key in list(os.environ):
        if key.startswith("ERNIE_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)


def settings(model: str):
    return load_settings(model=model, demo_model_dir=".cache/demo-model")


def never_called():
    pytest.fail("the hub must not be probed when the answer is known without it")


def cache_snapshot(tmp_path, repo_id: str, with_config: bool = True):
    snapshot = tmp_path / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    if with_config:
        (snapshot / "config.json").write_text("{}")


def test_demo_asks_for_the_demo_model(tmp_path):
    choice = choose_model(settings("demo"), reachable=never_called, root=tmp_path)
    assert choice.is_demo
    assert choice.path == str(tmp_path / ".cache" / "demo-model")  # anchored at the project


def test_demo_small_asks_for_the_smaller_demo_model_beside_it(tmp_path):
    choice = choose_model(settings("demo-small"), reachable=never_called, root=tmp_path)
    assert choice.is_demo and choice.demo_size == "small"
    assert choice.path == str(tmp_path / ".cache" / "demo-model-small")


def test_existing_folder_is_served_as_it_is(tmp_path):
    folder = tmp_path / "my-checkpoint"
    folder.mkdir()
    choice = choose_model(settings(str(folder)), reachable=never_called)
    assert not choice.is_demo
    assert choice.path == str(folder)


def test_relative_existing_folder_is_served(tmp_path):
    (tmp_path / "ckpt").mkdir()
    choice = choose_model(settings("./ckpt"), reachable=never_called)
    assert (choice.path, choice.is_demo) == ("ckpt", False)


@pytest.mark.parametrize("model", ["./nope", "/nope/model", "~/no-such-model-folder"])
def test_missing_path_is_an_error_not_a_silent_switch(model):
    with pytest.raises(FileNotFoundError) as info:
        choose_model(settings(model), reachable=never_called)
    message = str(info.value)
    assert f"ERNIE_MODEL={model!r}" in message
    assert "config.json" in message
    assert "'demo'" in message


def test_hub_id_in_the_local_cache_is_served_without_the_network(tmp_path):
    cache_snapshot(tmp_path, HUB_ID)
    choice = choose_model(settings(HUB_ID), reachable=never_called)
    assert (choice.path, choice.is_demo) == (HUB_ID, False)
    assert "cache" in choice.reason


def test_incomplete_cache_entry_does_not_count(tmp_path):
    cache_snapshot(tmp_path, HUB_ID, with_config=False)
    assert not in_hub_cache(HUB_ID)


def test_hub_id_not_cached_and_hub_unreachable_falls_back_to_demo(tmp_path):
    choice = choose_model(settings(HUB_ID), reachable=lambda: False, root=tmp_path)
    assert choice.is_demo
    assert choice.path == str(tmp_path / ".cache" / "demo-model")
    assert "huggingface.co" in choice.reason
    assert HUB_ID in choice.reason


def test_hub_id_not_cached_but_hub_reachable_is_downloaded_by_vllm():
    choice = choose_model(settings(HUB_ID), reachable=lambda: True)
    assert (choice.path, choice.is_demo) == (HUB_ID, False)


def test_hub_cache_dir_follows_hf_home(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"


def test_offline_mode_means_unreachable_without_trying(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("connected"))
    assert hub_reachable() is False
