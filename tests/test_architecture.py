"""The layout as a contract: imports run one way, modules stay small.

``./scripts/test`` runs ``lint-imports`` (import-linter) on the contracts in
pyproject.toml before any test.  These tests show that the contracts are live
(an import against the layers breaks them) and that nothing slips past them (a
new module in ``server/`` must be placed in a layer).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from server.paths import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_MODULE_LINES = 400


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module, bad_import, contract", [
    # The planner must not reach up into the stack.
    ("server/plan/kv_planner.py", "from server.stack import supervisor", "cli > loadtest > app"),
    # The chat app may use only the shared modules.
    ("app/history.py", "from server.plan import kv_planner", "imports only the shared"),
    # Two modules of one package that import each other.
    ("server/loadtest/bench/run.py", "import server.loadtest.bench.report", "No import cycle"),
    # The load tools' shared plumbing must not reach up into a tool ...
    ("server/loadtest/lib/stats.py", "from server.loadtest.bench import run", "loadtest: the tools"),
    # ... the engine's load generator must not know the chat app's tools ...
    ("server/loadtest/bench/command.py", "from server.loadtest.chat import cost", "loadtest: the tools"),
    # ... and the tools of one layer stay independent of each other.
    ("server/loadtest/users/capacity.py", "from server.loadtest.bench import run", "loadtest: the tools"),
    ("server/loadtest/lib/plots.py", "from server.loadtest.sweep import stats", "loadtest: the tools"),
])
def test_an_import_against_the_contracts_breaks_them(tmp_path, module, bad_import, contract):
    for part in ("server", "app"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{bad_import}  # added by the test\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert contract in done.stdout.split("Broken contracts", 1)[1], done.stdout


def test_every_shared_module_is_in_a_layer():
    """A module added to server/ without a place in the layers would be unchecked."""
    layers = next(c for c in contracts() if c["id"] == "layers")["layers"]
    placed = {name.strip() for layer in layers for name in layer.split(":")}
    modules = {f"server.{p.stem}" for p in (ROOT / "server").glob("*.py") if p.stem != "__init__"}
    assert modules - placed == set()


def test_no_module_is_over_the_size_limit():
    """One concept per module: past ~400 lines a module is doing two jobs."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for part in ("server", "app") for p in (ROOT / part).rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_comment_cites_a_file_outside_the_repository():
    """The facts the code relies on live in the repository (docs/notes.md), where readers are."""
    cited = re.compile("FACTS" + r"\.md")
    offenders = [str(p.relative_to(ROOT)) for part in ("server", "app", "tests", "scripts", ".chainlit")
                 for p in (ROOT / part).rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".toml", "")
                 and cited.search(p.read_text(encoding="utf-8", errors="ignore"))]
    assert offenders == []
