"""How many engine copies `up` runs when ERNIE_ENGINE_COPIES is unset (server/plan/engine_copies.py),
and the API servers each copy then gets: the rule, and the supervisor's plan that applies it."""

from __future__ import annotations

import os

import pytest

from server.plan import engine_copies
from server.plan.device import DeviceMemory
from server.plan.engine_copies import GIB, auto_copies, chooses_copies
from server.settings import load_settings
from server.stack import restart_control, rolling
from server.stack.roller import with_running_copies
from server.stack.supervisor import Stack
from server.stack.topology import auto_api_servers

pytestmark = pytest.mark.usefixtures("clean_env")

H100 = 80 * GIB
ERNIE_03B = int(0.72e9)  # 0.36 B parameters in bf16


def test_a_small_model_on_a_big_gpu_with_16_cores_gets_three_copies():
    choice = auto_copies("cuda", 16, ERNIE_03B, H100)
    assert choice.copies == 3
    assert "0.7 GiB of weights" in choice.reason and "80 GiB GPU with 16 cores" in choice.reason


@pytest.mark.parametrize("device, cores, weights, gpu, says", [
    ("cpu", 64, ERNIE_03B, H100, "no GPU"),
    ("cuda", 8, ERNIE_03B, H100, "this machine has 8"),
    ("cuda", 16, 42 * GIB, H100, "would take over 5%"),   # a 21B model
    ("cuda", 16, ERNIE_03B, None, "could not be read"),
    ("cuda", 16, None, H100, "could not be read"),
])
def test_one_copy_where_three_would_not_pay_or_cannot_be_judged(device, cores, weights, gpu, says):
    choice = auto_copies(device, cores, weights, gpu)
    assert choice.copies == 1 and says in choice.reason


def test_copies_are_chosen_only_when_nobody_set_them():
    assert chooses_copies(load_settings())
    assert not chooses_copies(load_settings(engine_copies=1))  # set, even to one
    assert not chooses_copies(load_settings(engine_url="http://10.0.0.5:8000"))
    assert not chooses_copies(load_settings(models="demo,demo-small"))
    assert not chooses_copies(load_settings(kv_cache_gib=20))  # every copy would take 20 GiB


def test_api_servers_per_copy_share_the_cores_of_several_copies():
    assert auto_api_servers("cuda", 16) == auto_api_servers("cuda", 16, 1) == 4
    assert auto_api_servers("cuda", 16, 3) == 2
    assert auto_api_servers("cuda", 32, 3) == 4
    assert auto_api_servers("cuda", 8, 3) == 1
    assert auto_api_servers("cpu", 16, 3) == 1


@pytest.fixture
def h100_box(monkeypatch):
    """This machine seen as a 16-core box with an 80 GiB GPU (NVML is not here)."""
    monkeypatch.setattr(engine_copies, "read_memory", lambda device: DeviceMemory("cuda", "H100", H100, H100))
    monkeypatch.setattr(os, "cpu_count", lambda: 16)


def test_up_on_a_gpu_box_plans_three_copies_of_two_api_servers_and_says_why(h100_box):
    said = []
    stack = Stack(load_settings(device="cuda"), out=said.append)
    topology = stack.plan()
    assert len(topology.copies) == 3 and topology.api_servers == 2 and len(topology.worker_ports) == 8
    assert stack.settings.engine_copies == 3  # what the rest of the stack (the plan, restarts) reads
    weights = engine_copies.load_shape(stack.settings.model)[0].weights  # the default model's, bundled
    assert said == ["[stack] " + auto_copies("cuda", 16, weights, H100).reason]
    assert topology.describe().startswith("3 engine copies x 2 API servers, 8 app workers")
    stack.plan()  # planned again (a check before the start): chosen once, said once
    assert len(said) == 1


def test_up_keeps_the_copies_it_is_given(h100_box):
    said = []
    topology = Stack(load_settings(device="cuda", engine_copies=1), out=said.append).plan()
    assert len(topology.copies) == 1 and topology.api_servers == 4 and said == []


def test_a_restart_keeps_the_running_copies_while_unset_and_refuses_a_change_of_set_ones():
    running = load_settings().model_copy(update={"engine_copies": 3})  # what `up` chose
    assert rolling.changed(running, with_running_copies(running, load_settings())) == []
    # `ernie-chat restart` sends the settings as it reads them: still unset, still not a change.
    sent = restart_control.settings_from(restart_control.settings_values(load_settings()))
    assert sent.engine_copies is None and rolling.changed(running, with_running_copies(running, sent)) == []
    sent = restart_control.settings_from(restart_control.settings_values(load_settings(engine_copies=3)))
    assert sent.engine_copies == 3 and rolling.changed(running, with_running_copies(running, sent)) == []
    # A number set is a change where it differs from what runs, which restart refuses.
    changed = with_running_copies(running, load_settings(engine_copies=2))
    assert changed.engine_copies == 2 and rolling.changed(running, changed) == ["engine_copies"]


def test_unset_copies_read_as_one_where_nothing_chose():
    assert load_settings().engine_copies is None and load_settings().copies_per_gpu == 1
    assert load_settings(engine_copies=2).copies_per_gpu == 2
