"""Models started on demand (ERNIE_MODELS_AT_ONCE, ERNIE_MODEL_IDLE_S): the settings, the plan,
the policy of server/stack/on_demand.py, the state and use files the chat and the supervisor
share, and the chat's loading notice. The real processes: tests/models/test_models_on_demand.py."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from app.engine.model_choice import Engines
from server import engine_state, model_wake
from server.plan import models
from server.plan.device import DeviceMemory
from server.plan.model_config import load_shape
from server.settings import SettingsError, load_settings
from server.settings.model_list import parse_models
from server.stack import on_demand
from server.stack.engine_tier import EngineTier
from tests.support.plans import ERNIE, GIB, gpu

pytestmark = pytest.mark.usefixtures("clean_env")


def models_settings(tmp_path, text="a,b,c", **values):
    return load_settings(models=text, log_file=tmp_path / "llm.log", kv_cache_gib=None, **values)


# --- settings ---------------------------------------------------------------------

def test_at_once_defaults_to_every_model(tmp_path):
    assert models_settings(tmp_path).at_once == 3
    assert models_settings(tmp_path, models_at_once=2).at_once == 2


def test_shares_that_fit_only_fewer_at_once_are_taken(monkeypatch):
    monkeypatch.setenv("ERNIE_MODELS", "a::0.5,b::0.4,c::0.3")
    with pytest.raises(SettingsError):
        load_settings()
    monkeypatch.setenv("ERNIE_MODELS_AT_ONCE", "2")
    assert load_settings().at_once == 2


# --- the plan ---------------------------------------------------------------------

def test_a_gpu_is_split_into_slots_and_the_others_wait(tmp_path):
    text = f"{ERNIE}:4096,{ERNIE}-b:4096:0.2,{ERNIE}-c:4096"
    settings = load_settings().model_copy(update={"models": text, "models_at_once": 2})
    entries = parse_models(text)
    planned = models.plan_models(settings, [(e, load_shape(ERNIE)[0]) for e in entries], gpu(141))
    assert [m.share for m in planned.models] == [0.45, 0.2, 0.45]
    assert planned.share_total == pytest.approx(0.9) and not planned.problems
    assert planned.together == 2


def test_a_gpu_too_small_for_the_slots_names_the_fix(tmp_path):
    text = f"{ERNIE}:131072,{ERNIE}-b:131072,{ERNIE}-c:131072"
    settings = load_settings().model_copy(update={"models": text, "models_at_once": 2})
    entries = parse_models(text)
    shape = load_shape(ERNIE)[0]
    planned = models.plan_models(settings, [(e, shape) for e in entries], gpu(2))
    assert planned.problems and all("ERNIE_MODELS_AT_ONCE" in p for p in planned.problems)


def test_on_a_cpu_the_largest_pools_at_once_must_fit(tmp_path):
    settings = load_settings(models="a,b,c", kv_cache_gib=None)
    shape = load_shape(ERNIE)[0]
    pool = settings.model_copy(update={"models": ""}).cpu_kv_cache_gib * GIB
    memory = DeviceMemory("cpu", "2 CPU cores", 64 * GIB, int(pool * 2.5))
    shaped = [(e, shape) for e in settings.model_entries]
    (refused,) = models.cpu_problems(settings, shaped, memory)
    assert "The models' KV pools add up to" in refused and "ERNIE_MODELS_AT_ONCE" in refused
    assert models.cpu_problems(settings.model_copy(update={"models_at_once": 2}), shaped, memory) == []
    (fewer,) = models.cpu_problems(settings.model_copy(update={"models_at_once": 3}), shaped, memory)
    assert "KV pools add up to" in fewer


# --- the policy -------------------------------------------------------------------

def test_up_starts_the_first_at_once():
    assert on_demand.first_started(["a", "b", "c"], 2) == ("a", "b")


def test_only_a_use_after_its_stop_wakes_a_model_oldest_request_first():
    asleep = {"a": 100.0, "b": 100.0, "c": 100.0}
    assert on_demand.asked_for(asleep, {"a": 99.0, "b": 130.0, "c": 120.0}) == ["c", "b"]
    assert on_demand.asked_for(asleep, {"a": None, "b": 100.0}) == []


def test_the_least_recently_used_model_that_is_not_busy_makes_room():
    activity = {"a": 10.0, "b": 5.0, "c": 20.0}
    assert on_demand.least_recently_used(activity, set()) == "b"
    assert on_demand.least_recently_used(activity, {"b"}) == "a"
    assert on_demand.least_recently_used(activity, {"a", "b", "c"}) is None


def test_idle_models_stop_only_with_a_limit():
    activity = {"a": 0.0, "b": 95.0}
    assert on_demand.idle(activity, 100.0, 0) == []
    assert on_demand.idle(activity, 100.0, 30) == ["a"]
    assert on_demand.idle(activity, 100.0, 3) == ["a", "b"]


# --- the files the chat and the supervisor share --------------------------------------

def test_each_model_has_its_state_and_its_load_time_survives_a_stop(tmp_path):
    settings = models_settings(tmp_path)
    engine_state.write_state(settings, "ready", "b", load_s=41.0)
    engine_state.write_state(settings, "asleep", "b")
    engine_state.write_state(settings, "restarting")
    assert engine_state.read_state(settings, "b")["state"] == "asleep"
    assert engine_state.read_state(settings, "b")["load_s"] == 41.0
    assert json.loads((tmp_path / "engine-state.json").read_text())["state"] == "restarting"
    assert engine_state.may_come_back({"state": "asleep"}, 600)


def test_a_crash_restart_records_its_own_load_time(tmp_path):
    settings = models_settings(tmp_path)
    tier = EngineTier(settings, (), "cpu", tmp_path, tmp_path / "llm-b.log", out=lambda line: None, model="b")
    engine_state.write_state(settings, "ready", "b", load_s=41.0)  # the start before the crash
    tier.start = lambda engine, already_started=False: time.sleep(0.3)  # vLLM loading again
    tier.restart(object())
    state = engine_state.read_state(settings, "b")
    assert state["state"] == "ready" and 0.3 <= state["load_s"] < 5, state


def test_a_use_is_the_files_mtime_and_only_the_owner_reads_it(tmp_path):
    settings = models_settings(tmp_path)
    assert model_wake.last_used(settings, "b") is None
    model_wake.mark_used(settings, "b")
    path = tmp_path / "model-used-b"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.utime(path, (1000, 1000))
    model_wake.mark_used(settings, "b")
    assert model_wake.last_used(settings, "b") > 1000


@pytest.mark.parametrize("forged", ["../x", "../../etc/passwd", "/tmp/x", "b/../c", "", ".", "persona"])
def test_a_forged_model_name_touches_no_file(tmp_path, forged):
    run = tmp_path / "run"
    run.mkdir()
    settings = models_settings(run)
    model_wake.mark_used(settings, forged)
    assert list(tmp_path.rglob("*")) == [run]
    with pytest.raises(ValueError):
        model_wake.used_path(settings, forged)


# --- the chat's side ----------------------------------------------------------------

def chat_engines(settings):
    return Engines(settings, lambda view: None, lambda view: None)


def test_the_chat_marks_its_model_used_and_says_it_loads(tmp_path):
    settings = models_settings(tmp_path)
    engine = chat_engines(settings).pick("b")[0]
    assert engine.key == "b" and engine.wake("en") is None  # no state: not on demand
    engine_state.write_state(settings, "asleep", "b")
    assert engine.asleep()
    assert engine.wake("en") == "⏳ Loading **b** … (first start); the reply follows once it is loaded."
    assert model_wake.last_used(settings, "b") is not None
    engine_state.write_state(settings, "ready", "b", load_s=41.2)
    engine_state.write_state(settings, "starting", "b")
    assert "（上次用时 41 秒）" in engine.wake("zh")
    engine_state.write_state(settings, "ready", "b")
    assert engine.wake("en") is None


def test_a_forged_profile_marks_the_first_model_and_no_path_of_its_own(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    settings = models_settings(run)
    engine, known = chat_engines(settings).pick("../x")
    assert not known and engine.key == "a"
    engine.wake("en")
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["model-used-a", "run"]


def test_one_model_keeps_the_one_state_file_and_marks_nothing(tmp_path):
    settings = load_settings(log_file=tmp_path / "llm.log")
    engine = chat_engines(settings).pick(None)[0]
    engine_state.write_state(settings, "starting")
    assert engine.key is None and engine.state()["state"] == "starting"
    assert engine.wake("en") is None and not list(tmp_path.glob("model-used-*"))
