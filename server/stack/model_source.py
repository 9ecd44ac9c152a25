"""Decide what the engine serves: the configured checkpoint, or the built-in demo model.

The default model is a hub id.  On a machine that can reach the hub (or has the
checkpoint in its local cache) vLLM downloads and serves it.  Where neither is
true, as on our CI machines, starting vLLM would only fail after minutes, so we
serve the demo model instead and say so loudly.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from server.errors import MissingFile
from server.plan.model_config import hub_cache_dir
from server.settings import DEMO_MODEL, DEMO_SMALL_MODEL, Settings

HUB_HOST = "huggingface.co"


@dataclass(frozen=True)
class ModelChoice:
    path: str        # what --model gets
    is_demo: bool
    reason: str      # one sentence for the console
    demo_size: str = "default"  # which demo model (server/stack/demo_model.py SIZES)


def in_hub_cache(repo_id: str) -> bool:
    snapshots = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return any(snapshots.glob("*/config.json"))


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """A TCP connect to the hub: cheap, and fails in milliseconds where DNS has no answer."""
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        return False
    try:
        with socket.create_connection((HUB_HOST, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def choose_model(settings: Settings, reachable=hub_reachable, root: Optional[Path] = None) -> ModelChoice:
    """``root`` (default: the working directory) anchors a relative ERNIE_DEMO_MODEL_DIR."""
    model = settings.model
    demo = ModelChoice(str((root or Path.cwd()) / settings.demo_model_dir), True, "")
    if model == DEMO_MODEL:
        return ModelChoice(demo.path, True, "ERNIE_MODEL=demo asks for the built-in demo model.")
    if model == DEMO_SMALL_MODEL:
        return ModelChoice(f"{demo.path}-small", True,
                           f"{DEMO_SMALL_MODEL} asks for the smaller built-in demo model.", "small")
    if Path(model).expanduser().is_dir():
        return ModelChoice(str(Path(model).expanduser()), False, f"local checkpoint {model}")
    if model.startswith((".", "/", "~")):
        # A path that does not exist is a typo, not a reason to switch models silently.
        raise MissingFile(
            f"ERNIE_MODEL={model!r} is not a folder. Give the folder that holds config.json, "
            "a hub id such as baidu/ERNIE-4.5-0.3B-PT, or 'demo'."
        )
    if in_hub_cache(model):
        return ModelChoice(model, False, f"{model} from the local hub cache")
    if reachable():
        return ModelChoice(model, False, f"{model} (downloaded by vLLM on first start)")
    return ModelChoice(
        demo.path,
        True,
        f"{model} is not cached here and {HUB_HOST} cannot be reached, so the built-in demo "
        "model is served instead. Its replies are word salad: it only shows the stack working. "
        "Set ERNIE_MODEL to a local checkpoint folder for real answers.",
    )
