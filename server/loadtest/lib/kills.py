"""``--kill PART@SECOND``: kill a named part of the running stack at a given second of a load run.

Parts: ``worker:N`` (app worker N, as the supervisor numbers them: ``[app N]``),
``engine:N`` (engine copy N's engine core, the process that computes), ``balancer``
(HAProxy).  They are found the way anyone would, from the outside: the process that
listens on the chat port, up its parents to the supervisor (``server.cli up``), then
down its process tree (``/proc``): a worker by the ``ERNIE_WORKER_INDEX`` the supervisor
gives it, a copy by the log its output goes to (``llm.log``, ``llm-copy1.log`` ...:
``server.stack.engine_tier.copy_log_path``), its engine core by vLLM's process title.
The supervisor then restarts what was killed, as it would after a crash.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Optional

from server.errors import LoadTestError

PARTS = ("worker", "engine", "balancer")
SYNTAX = "PART@SECOND, PART one of worker:N, engine:N, balancer (e.g. worker:1@15)"
COPY_LOG = re.compile(r"^llm(?:-copy(\d+))?\.log$")
ENGINE_CORE = "EngineCore"  # vLLM's title for the process that computes (VLLM::EngineCore_0)


class KillError(LoadTestError):
    """A --kill that cannot be understood or carried out; the message says which and why."""


@dataclass(frozen=True)
class Kill:
    part: str            # worker, engine or balancer
    index: Optional[int]  # which worker or copy; None for the balancer
    at_s: float          # seconds from the start of the run

    @property
    def name(self) -> str:
        return self.part if self.index is None else f"{self.part}:{self.index}"


def parse_kill(text: str) -> Kill:
    """``worker:1@15`` -> Kill("worker", 1, 15.0); a clear error for anything else."""
    what, at, second = text.strip().partition("@")
    part, colon, index = what.partition(":")
    try:
        at_s = float(second)
    except ValueError:
        at_s = -1.0
    if not at or at_s < 0:
        raise KillError(f"--kill {text!r}: give the second of the run to kill at, as {SYNTAX}.")
    if part not in PARTS:
        raise KillError(f"--kill {text!r}: no part {part!r}; expected {SYNTAX}.")
    if part == "balancer":
        if colon:
            raise KillError(f"--kill {text!r}: there is one balancer, without a number ({SYNTAX}).")
        return Kill(part, None, at_s)
    if not index.isdigit():
        raise KillError(f"--kill {text!r}: {part} needs its number, as {part}:0 ({SYNTAX}).")
    return Kill(part, int(index), at_s)


# --- the stack's processes, from /proc ---------------------------------------------------

@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cmdline: str
    environ: dict[str, str]
    stdout: str  # where its output goes (a log file's name)


def read_procs(root: Path = Path("/proc")) -> dict[int, Proc]:
    procs = {}
    for stat in root.glob("[0-9]*/stat"):
        folder = stat.parent
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (folder / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = dict(item.split("=", 1) for item in
                           (folder / "environ").read_bytes().decode(errors="replace").split("\0") if "=" in item)
            stdout = os.path.basename(os.readlink(folder / "fd" / "1"))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or another user's
        procs[int(folder.name)] = Proc(int(folder.name), ppid, cmdline, environ, stdout)
    return procs


def listeners(port: int, root: Path = Path("/proc")) -> set[str]:
    """Socket inodes listening on ``port`` (/proc/net/tcp, state 0A)."""
    found = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            rows = (root / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.add(cols[9])
    return found


def holder_of(inodes: set[str], root: Path = Path("/proc")) -> Optional[int]:
    for fd in root.glob("[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return int(fd.parent.parent.name)
    return None


def supervisor_of(pid: int, procs: dict[int, Proc]) -> Optional[int]:
    while pid in procs:
        if re.search(r"-m server\.cli up\b|ernie-chat up\b", procs[pid].cmdline):
            return pid
        pid = procs[pid].ppid
    return None


def below(pid: int, procs: dict[int, Proc]) -> list[Proc]:
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(procs[child])
            todo.append(child)
    return found


def copy_index(log_name: str) -> Optional[int]:
    found = COPY_LOG.match(log_name)
    return None if found is None else int(found.group(1) or 0)


def victim(kill: Kill, stack: list[Proc]) -> Proc:
    """The process to kill among the supervisor's (``below``): pure, for tests."""
    if kill.part == "balancer":
        found = [p for p in stack if p.cmdline.split(" ", 1)[0].endswith("haproxy")]
    elif kill.part == "worker":
        found = [p for p in stack if "app.serve" in p.cmdline
                 and p.environ.get("ERNIE_WORKER_INDEX") == str(kill.index)]
    else:
        tops = [p for p in stack if copy_index(p.stdout) == kill.index
                and ENGINE_CORE not in p.cmdline and "vllm" in p.cmdline]
        pids = {p.pid for p in tops}
        found = [p for p in stack if ENGINE_CORE in p.cmdline and copy_index(p.stdout) == kill.index
                 and (p.ppid in pids or not pids)]
    if not found:
        raise KillError(f"--kill {kill.name}: no such process runs under the supervisor now.")
    return min(found, key=lambda p: p.pid)  # the oldest: vLLM's helpers come after their parent


def find(kill: Kill, chat_port: int, root: Path = Path("/proc")) -> Proc:
    procs = read_procs(root)
    holder = holder_of(listeners(chat_port, root), root)
    supervisor = supervisor_of(holder, procs) if holder is not None else None
    if supervisor is None:
        raise KillError(f"--kill {kill.name}: no stack started by `ernie-chat up` (or "
                        f"./scripts/up) listens on port {chat_port} for this user.")
    return victim(kill, below(supervisor, procs))


async def run_kills(kills: list[Kill], chat_port: int, started: Awaitable[float],
                    out: Callable[[str], None]) -> list[dict]:
    """Kill each part at its second from ``started``: the perf_counter time the users' clock
    starts at, once it has. Not from the command's start: logging in and opening the client
    processes take seconds before the first user arrives, and a kill counted from there
    hit the stack before it was under load."""
    started = await started
    done = []
    for kill in sorted(kills, key=lambda k: k.at_s):
        await asyncio.sleep(max(0.0, started + kill.at_s - time.perf_counter()))
        at_s = time.perf_counter() - started
        try:
            proc = find(kill, chat_port)
            # A worker leads its own process group (its helpers go with it); vLLM's engine
            # core and HAProxy are killed alone, as a crash would take them.
            if kill.part == "worker":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                os.kill(proc.pid, signal.SIGKILL)
        except (KillError, OSError) as exc:
            out(f"kill {kill.name} at {at_s:.1f} s failed: {exc}")
            done.append({"part": kill.name, "at_s": at_s, "error": str(exc)})
            continue
        out(f"killed {kill.name} (pid {proc.pid}) at {at_s:.1f} s")
        done.append({"part": kill.name, "at_s": at_s, "pid": proc.pid})
    return done
