"""Create what the engine needs before its first start: its environment
(``server.stack.engine_env``) and the demo models.

Both steps are skipped when a stamp says their inputs have not changed, which makes a second
``up`` fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from server.paths import ROOT
from server.progress import run_step
from server.settings import Settings
from server.stack.engine_env import SETUP_LOG, STAMP, building, ensure_engine_env, file_digest
from server.stack.model_source import ModelChoice, choose_model

# glibc gives each training step's large tensors (the logits: 37 MB) back to the kernel and
# maps them again, zeroed, at the next step: 16 of the demo model's 76 CPU-seconds went there.
# Kept in the heap, the build took 62 CPU-seconds and 35 s instead of 43 on 2 idle cores, and
# wrote the same weights (docs/performance.md, "The set-up's demo models").
TRAINING_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                   "MALLOC_TOP_PAD_": str(256 << 20)}


def training_env(environ: dict) -> dict:
    """TRAINING_MALLOC, but what the user set."""
    return {name: value for name, value in TRAINING_MALLOC.items() if name not in environ}


def demo_inputs(root: Path = ROOT) -> list[Path]:
    here = root / "server" / "stack"
    return [here / "demo_model.py", here / "demo_corpus.txt"]


def ensure_demo_model(model_dir: Path, engine_python: Path, root: Path = ROOT,
                      size: str = "default") -> Path:
    """Build the demo model of ``size`` with the engine's Python (it has torch) unless it is current."""
    model_dir = model_dir if model_dir.is_absolute() else root / model_dir
    wanted = file_digest(*demo_inputs(root)) + ("" if size == "default" else f" {size}")
    stamp = model_dir / STAMP
    with building(model_dir):
        if stamp.exists() and stamp.read_text().strip() == wanted and (model_dir / "config.json").exists():
            return model_dir
        print("[setup] building the demo model (deterministic, under 2 min)", flush=True)
        run_step([str(engine_python), "-m", "server.stack.demo_model", str(model_dir), "--size", size],
                 "demo model", root / SETUP_LOG, cwd=root, env=training_env(os.environ),
                 done_message=f"built in {model_dir}")
        stamp.write_text(wanted + "\n")
    return model_dir


def ensure_model(choice: ModelChoice, python: Path, root: Path = ROOT) -> None:
    """The chosen model ready to serve: the demo model built where it is the one."""
    if choice.is_demo:
        ensure_demo_model(Path(choice.path), python, root, choice.demo_size)


def prepare_all(settings: Settings, device: str, root: Path = ROOT) -> Path:
    """Everything `up` sets up before its first start, without starting anything: the engine's
    environment, and each demo model among the models the settings serve. For an image's build
    step, or a test run that has it built while its first tests run. Returns the engine's Python."""
    python = ensure_engine_env(settings.engine_venv, device, root, settings.torch_index_url)
    for model in settings.served_models:
        ensure_model(choose_model(settings.model_copy(update={"model": model.name}), root=root), python, root)
    return python
