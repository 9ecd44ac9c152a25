"""qa-load --kill PART@SECOND: its parsing, and which process of a stack each part names."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.loadtest.lib.kills import Kill, KillError, Proc, below, copy_index, parse_kill, supervisor_of, victim
from server.stack.engine_args import EngineCopy
from server.stack.engine_tier import copy_log_path


@pytest.mark.parametrize("text, kill", [
    ("worker:1@15", Kill("worker", 1, 15.0)),
    ("engine:0@25.5", Kill("engine", 0, 25.5)),
    ("balancer@0", Kill("balancer", None, 0.0)),
])
def test_a_part_and_its_second_are_read(text, kill):
    assert parse_kill(text) == kill


@pytest.mark.parametrize("text, says", [
    ("worker:1", "second of the run"), ("worker:1@soon", "second of the run"),
    ("worker:1@-3", "second of the run"), ("gpu:0@5", "no part 'gpu'"),
    ("worker@5", "needs its number"), ("engine:x@5", "needs its number"),
    ("balancer:1@5", "one balancer"),
])
def test_a_bad_kill_says_what_is_wrong(text, says):
    with pytest.raises(KillError, match=says):
        parse_kill(text)


def test_a_copys_number_is_read_from_the_log_its_output_goes_to():
    names = [copy_log_path(Path("llm.log"), EngineCopy("127.0.0.1", 8000, index=i)).name for i in (0, 1, 2)]
    assert [copy_index(name) for name in names] == [0, 1, 2]
    assert copy_index("app-worker1.log") is None


def proc(pid, ppid, cmdline, stdout="x.log", **environ):
    return Proc(pid, ppid, cmdline, environ, stdout)


STACK = {p.pid: p for p in [
    proc(1, 0, "/sbin/init"),
    proc(10, 1, "python -m server.cli up"),
    proc(11, 10, "haproxy -f .cache/haproxy.cfg", "balancer.log"),
    proc(20, 10, "python -m server.stack.vllm_serve --port 4001", "llm.log"),
    proc(21, 20, "VLLM::APIServer_0", "llm.log"),
    proc(22, 20, "VLLM::EngineCore_0", "llm.log"),
    proc(30, 10, "python -m server.stack.vllm_serve --port 4002", "llm-copy1.log"),
    proc(32, 30, "VLLM::EngineCore_0", "llm-copy1.log"),
    proc(40, 10, "python -m app.serve run app/chat.py --port 5001", "app.log", ERNIE_WORKER_INDEX="0"),
    proc(41, 10, "python -m app.serve run app/chat.py --port 5002", "app-worker1.log", ERNIE_WORKER_INDEX="1"),
]}


def test_each_part_names_its_process_below_the_supervisor_of_the_chat_port():
    assert supervisor_of(11, STACK) == 10 and supervisor_of(1, STACK) is None
    stack = below(10, STACK)
    assert victim(Kill("balancer", None, 0), stack).pid == 11
    assert victim(Kill("worker", 1, 0), stack).pid == 41
    assert victim(Kill("engine", 0, 0), stack).pid == 22
    assert victim(Kill("engine", 1, 0), stack).pid == 32
    with pytest.raises(KillError, match="worker:2: no such process"):
        victim(Kill("worker", 2, 0), stack)
