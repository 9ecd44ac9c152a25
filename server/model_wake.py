"""When each model of ERNIE_MODELS was last asked for: the chat's side of starting models on demand.

The chat touches ``model-used-<served name>`` in the run folder (beside the logs and
``engine-state-<served name>.json``) before it asks a model and when a reply ends; the
file's mtime is the model's last use.  The supervisor (server/stack/on_demand.py) starts an
asleep model whose file is newer than its stop, and stops the least recently used one to
make room.  A file, like the engine's state, because the chat's workers and the supervisor
are separate processes that share only the run folder and the settings.

The served name always comes from ``Settings.served_models``: a name that is not one of
them touches nothing, so no name from a browser can reach another path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from server.private_files import FILE_MODE
from server.settings import Settings


def served(settings: Settings, model: str) -> bool:
    return any(entry.served_name == model for entry in settings.served_models)


def used_path(settings: Settings, model: str) -> Path:
    """``model``: a served name of ERNIE_MODELS (raises for any other name)."""
    if not served(settings, model):
        raise ValueError(f"{model!r} is not a served model")
    return settings.log_file.with_name(f"model-used-{model}")


def mark_used(settings: Settings, model: str) -> None:
    """Say that ``model`` is used now; a name that is not served is ignored."""
    try:
        path = used_path(settings, model)
    except ValueError:
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a chat run without `up` too
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def last_used(settings: Settings, model: str) -> Optional[float]:
    """When ``model`` was last marked used (a time.time()), or None if never."""
    try:
        return used_path(settings, model).stat().st_mtime
    except OSError:
        return None
