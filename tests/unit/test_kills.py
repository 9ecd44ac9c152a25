"""qa-load --kill PART@SECOND: its parsing, and which process of a stack each part names."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from server.loadtest.lib.kills import (Kill, KillError, Proc, below, copy_index, parse_kill, run_kills,
                                       supervisor_of, victim)
from server.stack.processes import free_port
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


async def test_a_kill_counts_its_second_from_when_the_users_start():
    """Logging in and starting client processes take seconds before the first user arrives:
    a kill at second 0.3 comes 0.3 s into the load, however long the start took. (No stack
    listens on the port: the kill is tried at its second, and says why it failed.)"""
    users_started: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    lines: list[str] = []
    called = time.perf_counter()
    killing = asyncio.create_task(run_kills([Kill("worker", 1, 0.3)], free_port(), users_started,
                                            lines.append))
    await asyncio.sleep(0.6)  # the start of the load: nothing is killed meanwhile
    assert not killing.done() and not lines
    started = time.perf_counter()
    users_started.set_result(started)
    done = await killing
    tried = time.perf_counter()
    assert tried - started >= 0.3 and tried - called >= 0.9
    # Its second counts from the users' start: below the 0.9 s it would be from the call.
    assert 0.29 <= done[0]["at_s"] < 0.9 and "no stack" in done[0]["error"]
    assert lines[0].startswith("kill worker:1 at 0.3 s failed")
