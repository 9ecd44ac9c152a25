"""The Pythons the README promises for the app: requirements/app.txt installs on 3.12 and
3.13 too, and the unit tests run there (3.11 is the project's own .venv).

Each environment is cached under .cache/ and keyed by app.txt's digest, like
scripts/lib.sh's ensure_app_env: the first run installs both at once (about 1.5 min; pip
mostly waits on the network), later runs only test. A version that is not installed here
is skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from server.stack import engine_env
from server.paths import ROOT
from tests.support.pythons import interpreter
APP_PINS = ROOT / "requirements" / "app.txt"
# Pure unit tests: no engine, no browser, but the settings, the planner and their imports.
UNIT_TESTS = ["tests/unit/test_kv_planner.py", "tests/unit/test_settings.py"]
VERSIONS = ["3.12", "3.13"]


def app_env(version: str) -> Path:
    """A venv of app.txt on that Python, built unless the cached one matches app.txt."""
    venv = ROOT / ".cache" / f"python{version}-app"
    stamp = venv / engine_env.STAMP
    wanted = engine_env.file_digest(APP_PINS)
    python = engine_env.venv_python(venv)
    if stamp.exists() and stamp.read_text().strip() == wanted and python.exists():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([str(interpreter(version)), "-m", "venv", str(venv)], check=True, timeout=300)
    # No byte-code at install: the two test modules import few of its 7,500 files, and
    # compiling them all costs each environment CPU seconds the other tests need.
    install = subprocess.run(engine_env.pip_install(python, "--no-deps", "--no-compile", "-r", str(APP_PINS)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert install.returncode == 0, f"app.txt does not install on Python {version}:\n{install.stdout[-3000:]}"
    stamp.write_text(wanted + "\n")
    return python


@pytest.fixture(scope="module")
def app_envs() -> dict[str, Future]:
    """Each version's environment, built side by side; its result re-raises a skip or a failure."""
    with ThreadPoolExecutor(len(VERSIONS)) as pool:
        return {version: pool.submit(app_env, version) for version in VERSIONS}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_app_environment_installs_and_the_unit_tests_pass(version, app_envs):
    python = app_envs[version].result()
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERNIE_")}
    tests = subprocess.run([str(python), "-m", "pytest", *UNIT_TESTS, "-q", "-p", "no:cacheprovider"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout and " failed" not in tests.stdout
