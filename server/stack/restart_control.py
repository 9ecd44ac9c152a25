"""How `ernie-chat restart` reaches the running `ernie-chat up`: files in its run folder.

The run folder is the folder of ERNIE_LOG_FILE, where `up` also says what the
engine does (server/engine_state.py).  There:

* ``supervisor.json``: the supervisor's process id, written at start, removed at stop;
* ``restart-request.json`` (mode 600: it holds the new settings, secrets too): made
  exclusively by the one restart that runs, removed by the supervisor when it is
  done, so a second restart meanwhile is refused;
* ``restart.json``: the running restart's progress lines and its end, which the
  command prints as they come.

The command loads the settings as `up` does (.env and the environment), writes
them in the request and sends the supervisor SIGHUP.  A plain ``kill -HUP`` of
the supervisor restarts too, with the settings the supervisor reads itself.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

from server.errors import ErnieChatError
from server.paths import ROOT
from server.private_files import PRIVATE_UMASK
from server.settings import Settings
from server.stack.rolling import plain

SIGNAL = signal.SIGHUP
# The supervisor answers a request within a watch-loop turn; this much means it did not.
TAKE_TIMEOUT_S = 15.0
ENDS = ("done", "failed", "refused")


class RestartError(ErnieChatError):
    """No running stack to restart, or one that did not answer."""


def run_folder(settings: Settings, root: Path = ROOT) -> Path:
    log = settings.log_file
    return (log if log.is_absolute() else root / log).parent


def supervisor_file(folder: Path) -> Path:
    return folder / "supervisor.json"


def request_file(folder: Path) -> Path:
    return folder / "restart-request.json"


def progress_file(folder: Path) -> Path:
    return folder / "restart.json"


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, default=str))
    tmp.replace(path)  # atomic: the reader never sees half a file


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def settings_values(settings: Settings) -> dict:
    """Every field's value, secrets in clear: what ``Settings(**values)`` rebuilds."""
    return {name: plain(getattr(settings, name)) for name in type(settings).model_fields}


def settings_from(values: dict) -> Settings:
    return Settings(_env_file=None, **values)


# --- the supervisor's side ------------------------------------------------------------

def announce(folder: Path) -> None:
    """At `up`'s start: where to signal, and no request left from a run that died."""
    folder.mkdir(parents=True, exist_ok=True)
    request_file(folder).unlink(missing_ok=True)
    write_json(supervisor_file(folder), {"pid": os.getpid(), "since": time.time()})


def withdraw(folder: Path) -> None:
    if read_json(supervisor_file(folder)).get("pid") == os.getpid():
        supervisor_file(folder).unlink(missing_ok=True)
    request_file(folder).unlink(missing_ok=True)


def claim(folder: Path, values: Optional[dict] = None) -> bool:
    """Make the request file, unless one exists (a restart runs): True if it was made."""
    try:
        old = os.umask(PRIVATE_UMASK)
        try:
            fd = os.open(request_file(folder), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        finally:
            os.umask(old)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        json.dump({"id": uuid.uuid4().hex, "settings": values}, out, default=str)
    return True


class Progress:
    """The supervisor's record of one restart, for the command that waits on it."""

    def __init__(self, folder: Path, request_id: str, out: Callable[[str], None]):
        self.path, self.out = progress_file(folder), out
        self.data = {"id": request_id, "pid": os.getpid(), "state": "running", "lines": []}
        write_json(self.path, self.data)

    def say(self, line: str) -> None:
        self.out(line)
        self.data["lines"].append(line)
        write_json(self.path, self.data)

    def end(self, state: str, line: str) -> None:
        self.data["state"] = state
        self.say(line)


# --- the command's side --------------------------------------------------------------

def running_supervisor(folder: Path) -> int:
    pid = read_json(supervisor_file(folder)).get("pid")
    if not isinstance(pid, int) or not alive(pid):
        raise RestartError(f"No running `ernie-chat up` found for the run folder {folder} "
                           f"(no live process in {supervisor_file(folder).name}). Start it with "
                           "./scripts/up; `restart` uses the same ERNIE_LOG_FILE to find it.")
    return pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def request(settings: Settings, root: Path = ROOT) -> tuple[int, str]:
    """Hand the supervisor new settings and signal it; its pid and the request's id."""
    folder = run_folder(settings, root)
    pid = running_supervisor(folder)
    if not claim(folder, settings_values(settings)):
        running = read_json(progress_file(folder))
        raise RestartError("A restart is already running; this one was not started. Wait until "
                           f"it ends ({len(running.get('lines', []))} step lines so far in "
                           f"{progress_file(folder)}), then run `ernie-chat restart` again.")
    request_id = read_json(request_file(folder))["id"]
    os.kill(pid, SIGNAL)
    return pid, request_id


def follow(settings: Settings, pid: int, request_id: str, out: Callable[[str], None] = print,
           root: Path = ROOT, every_s: float = 0.3) -> str:
    """Print the restart's lines as the supervisor writes them; its end state."""
    path = progress_file(run_folder(settings, root))
    shown, asked = 0, time.monotonic()
    while True:
        data = read_json(path)
        if data.get("id") == request_id:
            for line in data["lines"][shown:]:
                out(line)
            shown = len(data["lines"])
            if data["state"] in ENDS:
                return data["state"]
        elif time.monotonic() - asked > TAKE_TIMEOUT_S:
            raise RestartError(f"The supervisor (pid {pid}) did not take the restart within "
                               f"{TAKE_TIMEOUT_S:.0f} s; see its terminal.")
        if not alive(pid):
            raise RestartError(f"The supervisor (pid {pid}) stopped during the restart.")
        time.sleep(every_s)
