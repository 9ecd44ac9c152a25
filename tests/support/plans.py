"""The planners' tests: the plan CLI, a GPU's memory, the model shapes they use."""

from __future__ import annotations

import io
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout

from app.engine.model_choice import Engines
from server import cli
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
    """`ernie-chat plan ARGS` as the command line runs it, with no ERNIE_* variable and no hub
    cache; in this process, since a new one spends 0.4 s importing before it plans."""
    saved = dict(os.environ)
    for name in [k for k in os.environ if k.startswith("ERNIE_") or k == "VLLM_ALLOW_LONG_MAX_MODEL_LEN"]:
        del os.environ[name]
    os.environ["HF_HUB_CACHE"] = EMPTY_HUB
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main(["plan", *args])
            except SystemExit as exc:  # argparse's refusals
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(["ernie-chat", "plan", *args], code, out.getvalue(), err.getvalue())


GIB = 1024**3
ERNIE = "baidu/ERNIE-4.5-0.3B-PT"


def gpu(total_gib: float, free_gib: float | None = None) -> DeviceMemory:
    total = int(total_gib * GIB)
    return DeviceMemory("cuda", "H200", total, total if free_gib is None else int(free_gib * GIB))
