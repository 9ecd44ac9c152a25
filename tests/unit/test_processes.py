"""server/stack/processes.py: port checks that name the holder, children that never outlive us."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from server.stack import processes
from server.stack.processes import (ManagedProcess, ephemeral_floor, free_port, handed_out, port_free,
                                    port_problem, who_listens)
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


def test_a_block_of_ports_is_free_and_handed_out_whole():
    port = free_port(3)
    assert all(port_free("127.0.0.1", p) for p in range(port, port + 3))
    with handed_out() as taken:
        assert {port, port + 1, port + 2} <= set(taken)


def test_a_port_handed_out_in_another_process_is_not_handed_out_again(tmp_path, monkeypatch):
    """Two processes of one checkout (an `up` and a test process beside another) share the
    register: a process that sees every port of the range handed out falls back to the
    kernel's own choice rather than to one of them."""
    register = tmp_path / "ports"
    monkeypatch.setattr(processes, "HANDED_OUT", register)
    monkeypatch.setattr(processes, "ephemeral_floor", lambda: 20000)
    code = ("import sys; from server.stack import processes as p; from pathlib import Path; "
            "p.HANDED_OUT = Path(sys.argv[1]); p.ephemeral_floor = lambda: 20000; "
            "print(p.free_port(5))")
    other = int(subprocess.run([sys.executable, "-c", code, str(register)], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout)
    with handed_out(register) as taken:
        assert set(range(other, other + 5)) <= set(taken)
        # Everything but the other process's five ports handed out now, here.
        taken.update({p: 4e9 for p in range(10000, 20000) if not other <= p < other + 5})
    assert not 10000 <= free_port() < 20000


def test_an_expired_or_garbled_register_line_is_forgotten(tmp_path):
    register = tmp_path / "ports"
    register.write_text("25000:1\nnonsense\n25001:9999999999\n:\n")
    with handed_out(register) as taken:
        assert taken == {25001: 9999999999.0}
    assert register.read_text() == "25001:9999999999\n"


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
