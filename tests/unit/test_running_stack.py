"""The supervisor's hand-down, typed: the modules that get the running ``Stack`` use only what
``RunningStack`` (server/stack/running.py) names, and the Stack has all of it.

mypy checks the types where the supervisor passes itself; these tests need no mypy and
fail the moment one of those modules reaches into something the protocol does not name.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from server.paths import ROOT
from server.settings import Settings
from server.stack import model_tiers, on_demand, roller, watch_loop
from server.stack.running import RunningStack
from server.stack.supervisor import Stack

HANDED_DOWN_TO = (watch_loop, roller, on_demand, model_tiers)


def members() -> set[str]:
    """The protocol's attributes, properties and methods."""
    return set(typing.get_type_hints(RunningStack)) | {
        name for name, value in vars(RunningStack).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))}


def stack_uses(module) -> set[str]:
    """What ``module`` reads or sets on the stack: ``stack.<name>`` and ``self.stack.<name>``."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))

    def is_stack(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "stack") or (
            isinstance(node, ast.Attribute) and node.attr == "stack"
            and isinstance(node.value, ast.Name) and node.value.id == "self")
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and is_stack(node.value)}


def stack_parameters(module) -> dict[str, str]:
    """Each function's ``stack`` parameter and its annotation, as written."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    return {f"{module.__name__}.{node.name}": ast.unparse(arg.annotation) if arg.annotation else ""
            for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            for arg in node.args.args if arg.arg == "stack"}


@pytest.fixture
def stack(tmp_path) -> Stack:
    """A Stack as `up` makes it, before anything starts."""
    return Stack(Settings(_env_file=None, log_file=tmp_path / "llm.log"), root=tmp_path,
                 out=lambda _: None)


def test_the_stack_has_every_member_of_the_protocol(stack):
    assert isinstance(stack, RunningStack)
    assert members() - set(dir(stack)) == set()
    # The attributes the Stack sets are of the protocol's types (the unset ones are None).
    for name, hint in typing.get_type_hints(RunningStack).items():
        value = getattr(stack, name)
        if typing.get_origin(hint) is typing.Union:
            assert value is None, name
        elif not callable(value):
            assert isinstance(value, typing.get_origin(hint) or hint), name


@pytest.mark.parametrize("module", HANDED_DOWN_TO, ids=lambda m: m.__name__)
def test_a_module_that_gets_the_stack_uses_only_the_protocol(module):
    uses = stack_uses(module)
    assert uses, f"{module.__name__} no longer uses the stack: drop it from HANDED_DOWN_TO"
    assert uses - members() == set(), (
        f"{module.__name__} uses what server/stack/running.py's RunningStack does not name")


def test_the_protocol_names_nothing_unused():
    """Exactly what those modules use: a member none of them uses any more goes."""
    assert members() - set().union(*map(stack_uses, HANDED_DOWN_TO)) == set()


def test_every_stack_parameter_is_typed_with_the_protocol():
    parameters = {name: hint for module in HANDED_DOWN_TO for name, hint in stack_parameters(module).items()}
    assert parameters  # the parse found them
    assert {name: hint for name, hint in parameters.items() if hint != "RunningStack"} == {}


def test_the_handed_down_modules_are_every_user_of_the_stack():
    """A module of server/stack/ that starts taking a ``stack`` is added to HANDED_DOWN_TO (and so
    checked)."""
    checked = {Path(m.__file__) for m in HANDED_DOWN_TO}
    takers = {path.relative_to(ROOT).as_posix() for path in (ROOT / "server" / "stack").rglob("*.py")
              if path not in checked and any(
                  arg.arg == "stack" for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for arg in node.args.args)}
    assert takers == set()
