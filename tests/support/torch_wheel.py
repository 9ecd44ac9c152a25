"""The local CPU torch wheel the torch-index tests install from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from server.paths import ROOT
from server.stack import engine_env, platforms

WHEELS = Path("/opt/wheels")
TORCH = engine_env.pinned((ROOT / platforms.CPU_REQUIREMENTS["x86_64"]).read_text(), "torch")
TORCH_WHEEL = next(iter(sorted(WHEELS.glob("torch-*+cpu-cp311-*.whl"))), None)
LOCAL_TORCH = pytest.mark.skipif(
    TORCH_WHEEL is None or sys.version_info[:2] != (3, 11) or engine_env.platform.machine() != "x86_64",
    reason=f"needs the local CPU torch wheel for cp311 x86_64 in {WHEELS} (our machines have it)",
)
