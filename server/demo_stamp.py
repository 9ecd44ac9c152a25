"""How the built-in demo model is recognised (a stamp in its folder), and put in place.

``server.stack.demo_model`` writes the stamp when it builds the model; the chat
reads it (through the folder vLLM reports as the model's ``root``) to tell its
users that the replies are word salad by design.  Standard library only: the
demo build runs in the engine's environment.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

# demo_model.py stamps its build_info.json with this.
DEMO_BUILDER = "ernie-chat demo model"


def is_demo_model(model_dir: str) -> bool:
    """True when the folder the engine serves carries our demo model's build stamp."""
    info = Path(model_dir) / "build_info.json" if model_dir else None
    try:
        return bool(info and info.exists() and json.loads(info.read_text()).get("builder") == DEMO_BUILDER)
    except (OSError, ValueError):
        return False


def replace_dir(new: Path, target: Path) -> None:
    """``new`` renamed to ``target``, whose old folder steps aside first (a rename cannot
    overwrite a non-empty one): readers see the old complete model or the new one, never a mix."""
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)
