"""What the stack writes is its user's alone: saved chats, logs, settings, uploads.

The saved chats and their write-ahead log, the logs (which quote errors and prompts),
.env (passwords, keys) and uploaded files are nobody else's business on a shared
machine, yet under the usual umask 022 every account could read them.  So
``ernie-chat`` and each child it starts run with umask 077; what is written here
explicitly gets 0600 (a file that exists keeps its mode through a plain write); and
``up`` tightens what an earlier version left readable.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_UMASK = 0o077
FILE_MODE, DIR_MODE = 0o600, 0o700


def tighten(*paths: Path) -> None:
    """0600 for files, 0700 for folders and everything in them; a missing path is skipped,
    and so is a symbolic link (chmod would change what it points to, maybe not ours)."""
    for path in paths:
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(DIR_MODE)
            for folder, dirs, files in os.walk(path):
                tighten(*(Path(folder, name) for name in files))
                for name in dirs:
                    if not Path(folder, name).is_symlink():
                        Path(folder, name).chmod(DIR_MODE)
        elif path.is_file():
            path.chmod(FILE_MODE)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only from the first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    with open(fd, "w", encoding="utf-8") as out:
        out.write(text)
