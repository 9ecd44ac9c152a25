"""server/stack/processes.py: port checks that name the holder, children that never outlive us."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from server.stack.doctor import START_MARKER
from server.stack.processes import (ManagedProcess, ephemeral_floor, free_port, port_free, port_problem,
                                    who_listens)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def listening_port():
    """A port this test process listens on (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie waiting for its reaper counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat_file.parent.name))
    return members


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# --- ports -------------------------------------------------------------------

def test_port_in_use_is_not_free(listening_port):
    assert port_free("127.0.0.1", listening_port) is False


def test_unused_port_is_free():
    port = free_port()
    assert port_free("127.0.0.1", port) is True
    assert port_problem("127.0.0.1", port, "ERNIE_ENGINE_PORT") is None


def test_free_ports_are_distinct_and_below_the_ephemeral_range():
    # A planned port from the ephemeral range can be given to another socket before its
    # process binds it; the kernel never gives out ports below that range on its own.
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(1024 <= p < ephemeral_floor() for p in ports)


def test_who_listens_names_this_process(listening_port):
    holder = who_listens(listening_port)
    assert holder is not None
    assert holder.startswith(f"pid {os.getpid()}: ")


def test_port_problem_names_port_setting_and_holder(listening_port):
    message = port_problem("127.0.0.1", listening_port, "ERNIE_ENGINE_PORT")
    assert message is not None
    assert f"Port {listening_port} on 127.0.0.1" in message
    assert "ERNIE_ENGINE_PORT" in message
    assert f"pid {os.getpid()}:" in message
    assert f"ERNIE_ENGINE_PORT={listening_port + 1}" in message


# --- ManagedProcess --------------------------------------------------------------

def test_stop_ends_the_whole_process_group(tmp_path):
    log = tmp_path / "logs" / "engine.log"
    proc = ManagedProcess("engine", ["bash", "-c", "sleep 300 & sleep 300"], log,
                          marker=START_MARKER)
    proc.start()
    pgid = proc.pid
    try:
        assert os.getpgid(proc.pid) == pgid != os.getpgrp()  # its own group, led by the child
        # The leader and its background child (like vLLM's engine core) are both up first.
        assert wait_for(lambda: len(group_members(pgid)) >= 2, timeout_s=5)
        proc.stop(grace_s=5)
        assert not proc.alive()
        assert proc.returncode is not None
        # Zombies may linger until PID 1 reaps them; nothing may still run.
        assert group_members(pgid) == []
    finally:
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
    assert START_MARKER in log.read_text()


def test_log_gets_the_default_marker_and_the_output(tmp_path):
    log = tmp_path / "app.log"
    log.write_text("earlier run\n")
    proc = ManagedProcess("app", ["bash", "-c", "echo hello; echo oops >&2"], log)
    proc.start()
    assert proc.proc.wait(timeout=5) == 0
    text = log.read_text()
    assert text.startswith("earlier run\n")  # appended, never truncated
    assert "=== ernie-chat: starting app at " in text
    assert "hello\n" in text and "oops\n" in text
    assert proc.returncode == 0 and not proc.alive()


def test_extra_env_reaches_the_child(tmp_path):
    log = tmp_path / "env.log"
    proc = ManagedProcess("x", ["bash", "-c", 'echo "key=$VLLM_API_KEY"'], log,
                          env={"VLLM_API_KEY": "k-123"})
    proc.start()
    proc.proc.wait(timeout=5)
    assert "key=k-123" in log.read_text()


def test_a_lower_priority_holds_for_the_child_and_its_session_group(tmp_path):
    """The CPU engine runs at nice 10 so the chat stays responsive; under autogroup
    scheduling that takes the session group's nice too (processes._lower_priority)."""
    log = tmp_path / "nice.log"
    proc = ManagedProcess("x", ["sh", "-c", "ps -o ni= -p $$; cat /proc/self/autogroup || true"], log,
                          nice=10)
    proc.start()
    proc.proc.wait(timeout=5)
    lines = log.read_text().splitlines()[-2:]
    assert lines[0].strip() == "10"
    if Path("/proc/self/autogroup").exists():
        assert lines[1].endswith("nice 10"), lines


def test_stop_before_start_does_nothing(tmp_path):
    proc = ManagedProcess("x", ["true"], tmp_path / "x.log")
    proc.stop()
    assert proc.pid is None and not proc.alive()


PARENT = """
import sys, time
from pathlib import Path
from server.stack.processes import ManagedProcess
child = ManagedProcess("child", ["sleep", "300"], Path(sys.argv[1]))
child.start()
print(child.pid, flush=True)
time.sleep(300)
"""


def test_child_dies_when_its_parent_is_killed(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "child.log")],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    child_pid = None
    try:
        child_pid = int(parent.stdout.readline())
        assert pid_alive(child_pid)
        parent.send_signal(signal.SIGKILL)  # no cleanup code of the parent runs
        parent.wait(timeout=5)
        assert wait_for(lambda: not pid_alive(child_pid), timeout_s=5), \
            f"child {child_pid} outlived its SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child_pid and pid_alive(child_pid):
            os.killpg(child_pid, signal.SIGKILL)
