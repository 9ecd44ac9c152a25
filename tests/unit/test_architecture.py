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
import warnings
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
    ("app/conversation/history.py", "from server.plan import kv_planner", "imports only the shared"),
    # Two modules of one package that import each other.
    ("server/loadtest/bench/run.py", "import server.loadtest.bench.report", "No import cycle"),
    # The load tools' shared plumbing must not reach up into a tool ...
    ("server/loadtest/lib/stats.py", "from server.loadtest.bench import run", "loadtest: the tools"),
    # ... the engine's load generator must not know the chat app's tools ...
    ("server/loadtest/bench/command.py", "from server.loadtest.chat import cost", "loadtest: the tools"),
    # ... and the tools of one layer stay independent of each other.
    ("server/loadtest/users/capacity.py", "from server.loadtest.bench import run", "loadtest: the tools"),
    ("server/loadtest/lib/plots.py", "from server.loadtest.sweep import stats", "loadtest: the tools"),
    # The app's packages import only those below them: the conversation knows nothing of where
    # chats are kept ...
    ("app/conversation/history.py", "from app.kept import saved_chats", "app: handlers > pages"),
    # ... the engine and the login stay independent of each other ...
    ("app/engine/busy.py", "from app.auth import login_throttle", "app: handlers > pages"),
    # ... and the counters know nothing of the app.
    ("app/chat_metrics.py", "from app.engine import engine_client", "app: handlers > pages"),
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


def test_a_module_over_the_size_hint_is_named():
    """Past ~400 lines a module may be doing two jobs: a hint to look, not a rule to split by.

    Modules are split where a concept ends, so a long one is a warning in the test report."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for part in ("server", "app") for p in (ROOT / part).rglob("*.py")}
    for path, n in sorted(sizes.items()):
        if n > MAX_MODULE_LINES:
            warnings.warn(f"{path} has {n} lines (hint: {MAX_MODULE_LINES}); does it hold two concepts?")
    assert sizes, "no module was measured"


def test_no_comment_cites_a_file_outside_the_repository():
    """The facts the code relies on live in the repository (docs/notes.md), where readers are."""
    cited = re.compile("FACTS" + r"\.md")
    offenders = [str(p.relative_to(ROOT)) for part in ("server", "app", "tests", "scripts", ".chainlit")
                 for p in (ROOT / part).rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".toml", "")
                 and cited.search(p.read_text(encoding="utf-8", errors="ignore"))]
    assert offenders == []


def drawn_error_tree() -> dict[str, str]:
    """{class: parent} as server/errors.py's docstring draws the tree (4 characters a level)."""
    from server import errors
    tree = errors.__doc__.split("\n\n    ErnieChatError", 1)[1].split("\n\n", 1)[0]
    drawn, branch = {}, ["ErnieChatError"]  # branch: the open class at each depth
    for line in tree.splitlines()[1:]:
        prefix, name = re.match(r"^([ │├└─]*)(\w+)", line).groups()
        depth = len(prefix) // 4 - 1
        del branch[depth:]
        drawn[name] = branch[-1]
        branch.append(name)
    return drawn


ENGINE_ONLY_PACKAGES = {"torch", "vllm", "transformers", "tokenizers"}


def test_the_error_tree_in_errors_py_is_the_real_one():
    """Every failure class of the project is drawn in server/errors.py under its real parent."""
    import importlib
    import pkgutil

    import server
    from server.errors import ErnieChatError
    for module in pkgutil.walk_packages(server.__path__, "server."):
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as missing:  # run by the engine's Python, which has torch
            assert missing.name in ENGINE_ONLY_PACKAGES, f"{module.name}: {missing}"
    real, todo = {}, [ErnieChatError]
    while todo:
        parent = todo.pop()
        for child in parent.__subclasses__():
            if child.__module__.startswith("server."):
                real[child.__name__] = parent.__name__
                todo.append(child)
    assert drawn_error_tree() == real
