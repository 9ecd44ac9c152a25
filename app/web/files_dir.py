"""Each Chainlit worker keeps its uploaded and exported files in a directory of its own.

Chainlit 2.12 keeps every session's files under ``<app root>/.files/<session id>`` and, when
its server shuts down, deletes the whole ``.files`` directory; a session creates its own
subdirectory with ``mkdir`` without ``parents``.  So when one of several workers stops (a
restart after a crash, a second ``up`` in the same checkout, the tests' short-lived apps),
every other worker's sessions lose their files and the next upload fails with HTTP 500
(FileNotFoundError).  Seen in the full test run: the attachment and export tests failed
once another app of the same checkout had stopped, and passed alone.

Pointing both of Chainlit's names for the directory (``chainlit.config.FILES_DIRECTORY``,
read at each use by the session, and ``chainlit.server.FILES_DIRECTORY``, removed at
shutdown) at ``.files/worker-<pid>`` keeps each worker's clean-up to its own files.

A worker that crashes or is killed never cleans up, and its users' uploads would stay
on disk for good: so each worker, as it starts, removes the folders of workers that are
gone.  A folder whose pid now belongs to another program is as orphaned as one whose
pid is free; a live worker's, of this or another ``up`` of the checkout, is left alone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import chainlit.config
import chainlit.server

PREFIX = "worker-"


def install() -> Path:
    remove_orphans(chainlit.config.FILES_DIRECTORY)
    own = chainlit.config.FILES_DIRECTORY / f"{PREFIX}{os.getpid()}"
    own.mkdir(mode=0o700, parents=True, exist_ok=True)
    chainlit.config.FILES_DIRECTORY = own
    chainlit.server.FILES_DIRECTORY = own
    return own


def remove_orphans(files_root: Path) -> list[Path]:
    """Remove the folders of workers that are gone; return them."""
    gone = [folder for folder in files_root.glob(f"{PREFIX}*")
            if folder.name[len(PREFIX):].isdigit() and not is_worker(int(folder.name[len(PREFIX):]))]
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
    return gone


def is_worker(pid: int) -> bool:
    """Whether ``pid`` is a running Chainlit worker (``app.serve``, or ``chainlit run``)."""
    if not Path("/proc/self/cmdline").exists():
        # No /proc (macOS): whether the pid runs at all, the careful answer.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()  # empty for a zombie
    except OSError:
        return False
    return b"app.serve" in command or b"chainlit" in command
