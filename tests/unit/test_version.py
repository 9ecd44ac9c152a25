"""`ernie-chat --version` prints pyproject.toml's version, the project's one source of it."""

from __future__ import annotations

import subprocess
import sys

import tomllib

from server.paths import ROOT


def test_version_is_pyprojects():
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    done = subprocess.run([sys.executable, "-m", "server.cli", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"ernie-chat {expected}\n"
