"""The planners' tests: the plan CLI, a GPU's memory, the model shapes they use."""

from __future__ import annotations

import os
import subprocess
import sys

from app.engine.model_choice import Engines
from server.paths import ROOT
from server.plan.device import DeviceMemory
from server.settings import load_settings


def engines(**settings) -> Engines:
    made = []
    chosen = Engines(load_settings(**settings), lambda view: made.append(view) or f"client {len(made)}",
                     lambda view: None)
    assert len(made) == len(chosen.all)  # one client per model, made once
    return chosen


# A hub cache that does not exist: no real cache on this machine can change the result.
EMPTY_HUB = str(ROOT / "tests" / "no-such-hub-cache")


def plan_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ERNIE_") and k != "VLLM_ALLOW_LONG_MAX_MODEL_LEN"}
    env["HF_HUB_CACHE"] = EMPTY_HUB
    return subprocess.run([sys.executable, "-m", "server.cli", "plan", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


GIB = 1024**3
ERNIE = "baidu/ERNIE-4.5-0.3B-PT"


def gpu(total_gib: float, free_gib: float | None = None) -> DeviceMemory:
    total = int(total_gib * GIB)
    return DeviceMemory("cuda", "H200", total, total if free_gib is None else int(free_gib * GIB))
