"""`ernie-chat restart`'s pure parts (what may change, the order, the commands to HAProxy),
the files through which the command reaches `up`, and HAProxy's runtime API on a real
HAProxy in front of small HTTP servers. The restart of a whole stack under load is in
tests/stack/test_scale.py."""

from __future__ import annotations

import os
import stat

import pytest

from server.settings import Settings
from server.stack import balancer, balancer_runtime, restart_control, rolling
from tests.support.settings import settings


def check(old: Settings, new: Settings, copies: int = 2, workers: int = 2) -> list[str]:
    return rolling.check(old, new, copies, copies > 1, workers, workers > 1, starts_engine=True)


def test_settings_that_change_are_named_and_secrets_compared_by_value():
    old = settings(users="a:x")
    new = settings(users="a:y", max_num_seqs=7, system_prompt="Be brief.")
    assert check(old, new) == ["max_num_seqs", "system_prompt", "users"]
    assert check(old, settings(users="a:x")) == []


def test_settings_that_cannot_change_one_process_at_a_time_are_refused_by_name():
    with pytest.raises(rolling.RestartRefused) as info:
        check(settings(), settings(app_port=9999, engine_copies=3, max_num_seqs=7))
    message = str(info.value)
    assert "ERNIE_APP_PORT: HAProxy and the clients hold these addresses" in message
    assert "ERNIE_ENGINE_COPIES: the number of processes" in message
    assert "ERNIE_MAX_NUM_SEQS" not in message  # that one could change
    assert "stop `ernie-chat up` and start it again" in message


@pytest.mark.parametrize("copies, workers, needs", [
    (1, 2, "ERNIE_ENGINE_COPIES>=2"), (2, 1, "ERNIE_APP_WORKERS>=2")])
def test_one_copy_or_one_worker_is_refused_with_what_to_do(copies, workers, needs):
    with pytest.raises(rolling.RestartRefused) as info:
        check(settings(), settings(), copies, workers)
    assert f"restart without downtime needs {needs}" in str(info.value)


def test_an_engine_started_elsewhere_leaves_only_the_workers_to_restart():
    assert rolling.check(settings(), settings(), 0, False, 2, True, starts_engine=False) == []


def test_the_plan_restarts_every_copy_then_every_worker_one_at_a_time():
    steps = rolling.plan(["engine 0", "engine 1"], ["app", "app 1"])
    assert [(s.tier, s.index, s.label) for s in steps] == [
        ("engine", 0, "engine 0"), ("engine", 1, "engine 1"), ("chat", 0, "app"), ("chat", 1, "app 1")]


def test_haproxy_commands_move_a_server_and_its_last_resort_twin_together():
    assert balancer_runtime.set_state_commands("engine", 1, "drain") == [
        "set server engine_servers/engine1 state drain",
        "set server engine_servers/engine1-last-resort state drain"]
    with pytest.raises(ValueError):
        balancer_runtime.set_state_commands("chat", 0, "off")


def test_the_names_are_the_ones_the_configuration_gives():
    front = balancer.Frontend("chat", "127.0.0.1", 8080, (balancer.Backend("127.0.0.1", 1),
                                                          balancer.Backend("127.0.0.1", 2)), "/")
    text = balancer.render_haproxy(balancer.BalancerConfig((front,), stats_socket="/run/x/haproxy.sock"))
    assert "    stats socket /run/x/haproxy.sock mode 600 level admin\n" in text
    assert "backend chat_servers" in text
    for name in balancer_runtime.server_names("chat", 1):
        assert f"    server {name} " in text
    assert "stats socket" not in balancer.render_haproxy(balancer.BalancerConfig((front,)))


def test_sessions_are_read_from_show_stat():
    csv = ("# pxname,svname,qcur,qmax,scur,smax\n"
           "engine,FRONTEND,,,9,9\n"
           "engine_servers,engine0,0,0,3,5\n"
           "engine_servers,engine1,0,0,2,4\n"
           "engine_servers,engine1-last-resort,0,0,1,1\n"
           "engine_servers,BACKEND,0,0,6,9\n")
    assert balancer_runtime.sessions_of(csv, "engine", 0) == 3
    assert balancer_runtime.sessions_of(csv, "engine", 1) == 3
    with pytest.raises(balancer_runtime.RuntimeApiError):
        balancer_runtime.sessions_of(csv, "engine", 5)


def test_a_servers_status_is_read_from_show_stat():
    csv = ("# pxname,svname,scur,status\n"
           "engine_servers,engine0,0,UP\n"
           "engine_servers,engine0-last-resort,0,no check\n"
           "engine_servers,engine1,0,DOWN 1/2\n"
           "engine_servers,engine1-last-resort,0,no check\n")
    assert balancer_runtime.status_of(csv, "engine", 0) == "UP"
    assert balancer_runtime.status_of(csv, "engine", 1) == "DOWN 1/2"
    with pytest.raises(balancer_runtime.RuntimeApiError):
        balancer_runtime.status_of(csv, "chat", 0)


def test_wait_for_holds_or_gives_up_at_its_bound():
    answers = iter([False, False, True])
    assert rolling.wait_for(lambda: next(answers), 10, every_s=0)
    assert not rolling.wait_for(lambda: False, 0.05, every_s=0.01)


def test_wait_drained_stops_at_zero_or_at_its_bound():
    left, said = iter([2, 1, 0]), []
    assert rolling.wait_drained(lambda: next(left), 10, said.append, "engine 0", every_s=0)
    assert said == ["[restart] engine 0: waiting for 2 to end", "[restart] engine 0: waiting for 1 to end"]
    said.clear()
    assert not rolling.wait_drained(lambda: 1, 0.05, said.append, "app 1", every_s=0.01)
    assert "stopping it anyway" in said[-1]


def test_the_new_settings_travel_whole_secrets_included():
    new = settings(users="a:secret", api_key="k-123", max_num_seqs=7)
    again = restart_control.settings_from(restart_control.settings_values(new))
    assert rolling.changed(new, again) == []


def test_one_request_at_a_time_in_a_private_file(tmp_path):
    assert restart_control.claim(tmp_path, {"max_num_seqs": 7})
    path = restart_control.request_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not restart_control.claim(tmp_path)
    assert restart_control.read_json(path)["settings"] == {"max_num_seqs": 7}


def test_the_command_finds_no_stack_where_none_runs(tmp_path):
    with pytest.raises(restart_control.RestartError) as info:
        restart_control.request(settings(log_file=tmp_path / "llm.log"))
    assert "No running `ernie-chat up`" in str(info.value)


def test_the_command_prints_the_lines_until_the_end(tmp_path):
    s = settings(log_file=tmp_path / "llm.log")
    progress = restart_control.Progress(tmp_path, "r1", lambda _: None)
    progress.say("[restart] 1/2: engine 0")
    progress.end("done", "[restart] done")
    shown = []
    assert restart_control.follow(s, os.getpid(), "r1", shown.append) == "done"
    assert shown == ["[restart] 1/2: engine 0", "[restart] done"]


def test_a_socket_that_is_not_there_says_so(tmp_path):
    with pytest.raises(balancer_runtime.RuntimeApiError) as info:
        balancer_runtime.set_state(tmp_path / "none.sock", "engine", 0, "drain")
    assert "does not answer" in str(info.value)
