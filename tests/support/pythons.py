"""The Pythons of this machine other than the project's own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from server.stack import engine_env

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def interpreter(version: str) -> Path:
    """The real executable (not a pyenv shim) of python<version> on PATH or of pyenv's
    version; skips the test when neither runs."""
    found = [shutil.which(f"python{version}")] + sorted(map(str, PYENV.glob(f"{version}.*/bin/python{version}")))
    wanted = tuple(int(part) for part in version.split("."))
    for candidate in filter(None, found):
        if engine_env.python_version(candidate) == wanted:
            return Path(subprocess.run([candidate, "-c", "import sys; print(sys.executable)"],
                                       capture_output=True, text=True, timeout=30).stdout.strip())
    pytest.skip(f"Python {version} is not installed here (no python{version} on PATH, none under {PYENV})")
