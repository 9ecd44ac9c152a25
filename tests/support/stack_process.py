"""`ernie-chat up` as a child of a test: its output read line by line, its processes found.

Shared by the tests that run the whole stack as a user does (test_supervisor,
test_faults, test_scale).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from server.paths import ROOT
from server.settings import Settings
from server.stack.processes import free_port


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, found through /proc (children of children too)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def serving(up: "Up", timeout_s: float = 1200):
    """``up`` once its chat answers, stopped after: the body of a module's stack fixture."""
    try:
        up.wait_for(r"^Chat: ", timeout_s=timeout_s)
        yield up
    finally:
        up.stop()


class Up:
    """`ernie-chat up` in a subprocess, its output collected by a reader thread."""

    def __init__(self, tmp: Path, **env: Optional[str]):
        """``env`` overrides the defaults below; None unsets one."""
        self.engine_port, self.app_port, self.metrics_port = free_port(), free_port(), free_port()
        self.settings = Settings(_env_file=None, log_file=tmp / "llm.log")  # where its state file is
        self.env = {**os.environ, "ERNIE_MODEL": "demo", "ERNIE_ENGINE_PORT": str(self.engine_port),
                    "ERNIE_APP_PORT": str(self.app_port), "ERNIE_METRICS_PORT": str(self.metrics_port),
                    "ERNIE_LOG_FILE": str(tmp / "llm.log"),
                    "ERNIE_MAX_MODEL_LEN": "4096", "ERNIE_KV_CACHE_GIB": "1",
                    "ERNIE_LIVE_CHATS_DIR": str(tmp / "live-chats"), **env}
        self.env = {name: value for name, value in self.env.items() if value is not None}
        self.proc = subprocess.Popen([sys.executable, "-m", "server.cli", "up"], cwd=ROOT, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.read_at: list[float] = []  # when each line was read (time.time())
        self.reader = threading.Thread(target=self._read, daemon=True)  # ends with the output
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.read_at.append(time.time())  # first: every line has its time
            self.lines.append(line.rstrip())

    def wait_for(self, pattern: str, timeout_s: float = 600, after: int = 0) -> int:
        """Index of the first output line after ``after`` matching ``pattern``."""
        deadline = time.monotonic() + timeout_s
        exited_at = None
        while time.monotonic() < deadline:
            for i in range(after, len(self.lines)):
                if re.search(pattern, self.lines[i]):
                    return i
            if self.proc.poll() is not None:
                # Its last lines may still be on their way through the reader thread.
                exited_at = exited_at or time.monotonic()
                assert time.monotonic() - exited_at < 2, (
                    f"`up` exited ({self.proc.returncode}) with no line matching {pattern!r}:\n{self.output()}")
            time.sleep(0.2)
        raise AssertionError(f"no line matching {pattern!r}:\n{self.output()}")

    def output(self) -> str:
        return "\n".join(self.lines[-40:])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.app_port}"

    def pid_of(self, needle: str) -> int:
        for pid in descendants(self.proc.pid):
            try:
                if needle in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    return pid
            except OSError:
                continue
        raise AssertionError(f"no process running {needle!r} under the supervisor")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


KEY_FILE = ROOT / ".cache" / "engine-api-key"


def network_address() -> Optional[str]:
    """An address of this machine that is not loopback (where other machines reach it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
