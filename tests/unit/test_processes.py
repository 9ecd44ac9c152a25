"""server/stack/processes.py: port checks that name the holder, children that never outlive us."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from server.stack.processes import (ManagedProcess, ephemeral_floor, free_port, port_free, port_problem,
                                    who_listens)
from tests.support.stack_process import wait_for

ROOT = Path(__file__).resolve().parents[2]


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
