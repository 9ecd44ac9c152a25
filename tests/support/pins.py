"""The CPU pin files (requirements/) and the names in them."""

from __future__ import annotations

from pathlib import Path

from server.paths import ROOT
from server.stack import platforms

X86 = ROOT / platforms.CPU_REQUIREMENTS["x86_64"]
ARM = ROOT / platforms.CPU_REQUIREMENTS["aarch64"]


def requirements(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def name(requirement: str) -> str:
    return requirement.split("==", 1)[0].strip().lower()
