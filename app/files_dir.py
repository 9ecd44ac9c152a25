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
"""

from __future__ import annotations

import os
from pathlib import Path

import chainlit.config
import chainlit.server


def install() -> Path:
    own = chainlit.config.FILES_DIRECTORY / f"worker-{os.getpid()}"
    own.mkdir(parents=True, exist_ok=True)
    chainlit.config.FILES_DIRECTORY = own
    chainlit.server.FILES_DIRECTORY = own
    return own
