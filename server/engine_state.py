"""A small file where the supervisor says what the engine is doing, for the chat to read.

A refused connection looks the same whether vLLM crashed or is still loading;
this file lets the chat tell the user which one it is.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from server.settings import Settings


def state_path(settings: Settings) -> Path:
    return settings.log_file.with_name("engine-state.json")


def write_state(settings: Settings, state: str, **details) -> None:
    """state: starting | ready | restarting | failed | stopped."""
    path = state_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"state": state, "since": time.time(), **details}))
    tmp.replace(path)  # atomic: the chat never reads half a file


# When vLLM's engine core dies, its API servers close their port at once, while its main
# process, whose exit the supervisor sees, stops them only up to 5 s later (seen on the H200):
# "ready" stands that long while nothing answers.
DEATH_NOTICE_S = 10.0


def may_come_back(state: dict, unreachable_for_s: float) -> bool:
    """Whether an engine that does not answer is worth waiting for: the supervisor starts or
    restarts it, or says it is ready and may not have seen it die yet.  Without a supervisor
    (no state, or an engine elsewhere), or once it gave up, the engine is down."""
    name = state.get("state")
    return name in ("starting", "restarting") or (name == "ready" and unreachable_for_s < DEATH_NOTICE_S)


def read_state(settings: Settings) -> dict:
    try:
        return json.loads(state_path(settings).read_text())
    except (OSError, ValueError):
        return {}
