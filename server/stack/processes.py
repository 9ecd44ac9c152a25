"""Child processes that never outlive the supervisor, and port checks that name the culprit.

Each child runs in its own process group (so one signal reaches vLLM's engine
core and workers too) and asks the kernel to kill it if the supervisor dies
(PR_SET_PDEATHSIG), so even ``kill -9`` of the supervisor leaves no engine
holding the GPU.  The kernel sends that signal when the *thread* that started the
child ends, so children are started only from threads that live as long as the
supervisor (its main thread, ``roller.serve``).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import random
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from server.paths import ROOT
from server.private_files import PRIVATE_UMASK, tighten

_PR_SET_PDEATHSIG = 1


def _lower_priority(nice: int) -> None:
    """Run this process and its children at ``nice``, also under session autogroups.

    Where the kernel groups processes by session for scheduling (autogroup: this
    machine, most desktop distributions), nice only ranks a process against others of
    its session, and a child started in a session of its own would compete with the
    chat as an equal whatever its nice: the session group's own nice must be set too.
    """
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:
        pass  # no autogroup here: nice alone ranks the process


def _die_with_parent(parent_pid: int, nice: int = 0):
    def preexec() -> None:
        if nice:
            _lower_priority(nice)  # after setsid: the new session's group
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            pass  # not Linux: process groups still cover clean shutdowns
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
    return preexec


class ManagedProcess:
    """One child process in its own group, its output appended to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *,
                 env: Optional[dict] = None, cwd: Optional[Path] = None, marker: str = "",
                 nice: int = 0):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.env, self.cwd, self.marker, self.nice = env, cwd, marker, nice
        self.proc: Optional[subprocess.Popen] = None
        self._reaper: Optional[subprocess.Popen] = None
        self.started_at = 0.0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as log:
            tighten(self.log_path)  # logs quote prompts and errors
            log.write(f"\n{self.marker or '=== ernie-chat: starting ' + self.name} "
                      f"at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})}, cwd=self.cwd,
                start_new_session=True, preexec_fn=_die_with_parent(os.getpid(), self.nice),
                umask=PRIVATE_UMASK,  # the chats, uploads and logs it writes: server/private_files.py
            )
        self._reaper = _start_reaper(os.getpid(), self.proc.pid)
        self.started_at = time.monotonic()

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.poll() if self.proc else None

    def kill(self) -> None:
        """SIGKILL the whole group at once: for a hung process that ignores SIGTERM."""
        if self.proc is not None:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the whole group, then SIGKILL what is left after ``grace_s``."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session makes the child its group's leader
        _signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        # Grandchildren (vLLM's engine core) may outlive the leader: sweep the group.
        deadline = time.monotonic() + 5
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        _signal_group(pgid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper.wait()


def _start_reaper(parent_pid: int, pgid: int) -> subprocess.Popen:
    """A tiny shell that ends the child's whole group if the supervisor dies.

    PR_SET_PDEATHSIG reaches only the group leader, and vLLM ignores SIGTERM while it
    is still starting, so a supervisor killed with -9 at that moment would leave the
    engine and its engine-core process holding the GPU.  The reaper lives in its own
    session (it survives the supervisor) and exits once its work is done.
    """
    script = (f"while kill -0 {parent_pid} 2>/dev/null; do sleep 1; done; "
              f"kill -TERM -{pgid} 2>/dev/null; sleep 5; kill -KILL -{pgid} 2>/dev/null")
    return subprocess.Popen(["sh", "-c", script], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """True while a process of the group still runs; zombies do not count.

    killpg(pgid, 0) would also see zombies, which linger until their new parent
    (PID 1) reaps them, so stop() would wait for nothing.
    """
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False


# --- ports -----------------------------------------------------------------

def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            return True
        except OSError:
            return False


def who_listens(port: int) -> Optional[str]:
    """'pid 123: python -m http.server' for the process listening on ``port``, if visible."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    if not inodes:
        return None
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (pid_dir / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                    return f"pid {pid_dir.name}: {cmd[:120]}"
        except OSError:
            continue
    return None


def port_problem(host: str, port: int, setting: str) -> Optional[str]:
    """None when ``port`` is free, else a message that says who holds it and what to do."""
    if port_free(host, port):
        return None
    holder = who_listens(port)
    who = f" by {holder}" if holder else ""
    return (f"Port {port} on {host} ({setting}) is already in use{who}. Stop that program "
            f"or choose another port, e.g. {setting}={port + 1}.")


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Ports handed out by any process of this checkout (an `up`, a test process beside another),
# with when each may be handed out again: a vLLM binds its port only after its imports.
HANDED_OUT = ROOT / ".cache" / "ports-handed-out"
HANDED_OUT_S = 600


def ephemeral_floor() -> int:
    """The lowest port the kernel hands out for port 0 and outgoing connections."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


@contextmanager
def handed_out(path: Optional[Path] = None) -> Iterator[dict[int, float]]:
    """The ports handed out and not yet expired (port -> until when), held for this process
    alone while it picks; what it adds is written back. A checkout that cannot be written
    to gets a register of this process's own."""
    path = path or HANDED_OUT
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        register = open(path, "a+")
    except OSError:
        yield _own_ports
        return
    with register:
        fcntl.flock(register, fcntl.LOCK_EX)
        register.seek(0)
        now, ports = time.time(), {}
        for line in register.read().split():
            port, _, until = line.partition(":")
            if port.isdigit() and until.replace(".", "", 1).isdigit() and float(until) > now:
                ports[int(port)] = float(until)
        yield ports
        register.seek(0)
        register.truncate()
        register.write("".join(f"{port}:{until:.0f}\n" for port, until in ports.items()))


_own_ports: dict[int, float] = {}


def free_port(count: int = 1) -> int:
    """A free loopback port for a process that binds it later, with the ``count - 1`` after it
    free too, from below the kernel's ephemeral range: a port from that range (what binding
    port 0 gives) can go to another socket, such as one of vLLM's own, in the minute before
    ours binds it. A CI rehearsal saw a second engine copy find its port taken that way
    (Errno 98). No process of this checkout gets the same port within HANDED_OUT_S."""
    floor = ephemeral_floor()
    with handed_out() as taken:
        for _ in range(500):
            port = random.randrange(max(1024, floor - 10000), floor - count + 1)
            block = range(port, port + count)
            if not any(p in taken for p in block) and all(port_free("127.0.0.1", p) for p in block):
                taken.update(dict.fromkeys(block, time.time() + HANDED_OUT_S))
                return port
    with socket.socket() as sock:  # that whole block is taken: the kernel's choice, as before
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
