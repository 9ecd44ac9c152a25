"""server/stack/processes.py's ManagedProcess: real children, their groups, logs and priority."""

from __future__ import annotations

import os
import signal
from pathlib import Path


from server.stack.doctor import START_MARKER
from server.stack.processes import ManagedProcess
from tests.support.stack_process import wait_for


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
