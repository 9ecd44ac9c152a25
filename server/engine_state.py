"""A small file where the supervisor says what the engine is doing, for the chat to read.

A refused connection looks the same whether vLLM crashed or is still loading;
this file lets the chat tell the user which one it is.  With ERNIE_MODELS each model has
its own (``engine-state-<served name>.json``, ``model`` below); ERNIE_MODEL alone has
``engine-state.json``.  ``load_s``, how long the engine's last start took, stays in the
file across stops and starts, so the chat can say how long a model takes to load.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from server.settings import Settings

# Kept from the file before when a new state does not say.
CARRIED = ("load_s",)


def state_path(settings: Settings, model: Optional[str] = None) -> Path:
    """``model``: a served name of ERNIE_MODELS (always one of ``Settings.served_models``)."""
    return settings.log_file.with_name(f"engine-state-{model}.json" if model else "engine-state.json")


def write_state(settings: Settings, state: str, model: Optional[str] = None, **details) -> None:
    """state: starting | ready | restarting | failed | stopped | asleep (started on demand,
    not loaded now)."""
    path = state_path(settings, model)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {key: value for key, value in read_state(settings, model).items() if key in CARRIED}
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({**kept, "state": state, "since": time.time(), **details}))
    tmp.replace(path)  # atomic: the chat never reads half a file


# When vLLM's engine core dies, its API servers close their port at once, while its main
# process, whose exit the supervisor sees, force-kills them 5 s later and then exits: on the
# H200 "ready" stood 8-11 s while nothing answered (docs/performance.md, "Parts killed under
# load"), and 10 s failed 4 chats of 800 in one run of three.
DEATH_NOTICE_S = 30.0


def may_come_back(state: dict, unreachable_for_s: float) -> bool:
    """Whether an engine that does not answer is worth waiting for: the supervisor starts or
    restarts it, or says it is ready and may not have seen it die yet.  Without a supervisor
    (no state, or an engine elsewhere), or once it gave up, the engine is down.  An asleep
    model starts on demand once a chat asks for it."""
    name = state.get("state")
    return name in ("starting", "restarting", "asleep") or (name == "ready" and unreachable_for_s < DEATH_NOTICE_S)


def read_state(settings: Settings, model: Optional[str] = None) -> dict:
    try:
        return json.loads(state_path(settings, model).read_text())
    except (OSError, ValueError):
        return {}
