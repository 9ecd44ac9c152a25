"""What a self-hoster does with the data a run keeps: back it up, restore it, hand one user
everything of theirs, and remove a person who left (``ernie-chat backup``, ``restore``,
``export-user``, ``delete-user``; docs/operations.md).

- ``places``: where this machine's settings keep the data, and whether `up` runs now;
- ``database``: one way to query the chat database and the login store, SQLite or PostgreSQL;
- ``manifest``: a backup's list of files, their sizes and checksums (pure);
- ``backup`` and ``restore``: the whole of it, consistent while the stack serves;
- ``user_data``: one user's data, exported or deleted;
- ``audit``: the commands' audit records, and the newest records printed.
"""

from __future__ import annotations

from server.errors import BadInput, ErnieChatError


class DataLifeError(ErnieChatError, RuntimeError):
    """A backup, restore, export or deletion that cannot be done as asked; nothing was changed
    unless the message says so."""


class NoSuchUser(BadInput, LookupError):
    """export-user or delete-user named someone the data does not know."""
