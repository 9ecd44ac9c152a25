"""How the built-in demo model is recognised: a stamp in its folder.

``server.stack.demo_model`` writes the stamp when it builds the model; the chat
reads it (through the folder vLLM reports as the model's ``root``) to tell its
users that the replies are word salad by design.  Standard library only: the
demo build runs in the engine's environment.
"""

from __future__ import annotations

import json
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
