"""The cheap check that decides whether torch comes from pip's own indexes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from server.stack import engine_env
from tests.support.torch_wheel import LOCAL_TORCH, TORCH

pytestmark = LOCAL_TORCH


def probe(python: Path) -> int:
    return subprocess.run(engine_env.torch_probe(python, TORCH), capture_output=True, timeout=120).returncode


def test_the_probe_finds_torch_locally_and_not_on_a_fresh_box(monkeypatch, tmp_path):
    """The cheap check that decides, by exit code: local sources found it here, PyPI alone not."""
    started = time.monotonic()
    assert probe(Path(sys.executable)) == 0
    print(f"probe with the local wheel folder: {time.monotonic() - started:.1f} s")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    assert probe(Path(sys.executable)) != 0
