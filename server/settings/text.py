"""The words around the settings: .env.example, error reports, .env lines that are not settings.

Kept apart from the Settings class (server/settings/__init__.py) so that it stays one
readable class; these functions take its fields as an argument.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import SecretStr, ValidationError

from server.chat_db import without_password

ENV_PREFIX = "ERNIE_"
_ENV_LINE = re.compile(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*\s*=")


def env_name(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


def describe_errors(exc: ValidationError, fields: dict, secret_fields: set[str]) -> str:
    """One line per bad field: which variable, what value, what is allowed."""
    lines = ["Invalid settings (from the environment or .env):"]
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        message = err["msg"].removeprefix("Value error, ")
        if not field:  # a rule across fields: its message names them
            lines.append(f"  {message}")
            continue
        given = err.get("input")
        # A password in a URL is hidden, whichever setting the URL was given in.
        value = ("<hidden>" if field in secret_fields
                 else repr(without_password(given) if isinstance(given, str) else given))
        lines.append(f"  {env_name(field)}={value}: {message}")
        described = fields.get(field)
        if described is not None and described.description:
            lines.append(f"      ({described.description})")
    lines.append("Fix the value in .env or the environment; .env.example lists every setting.")
    return "\n".join(lines)


def env_value(value) -> str:
    """A setting's value as its ERNIE_* variable holds it (secrets in clear: for a child's env)."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return str(value).lower() if isinstance(value, bool) else str(value)


def env_file_report(path: Path) -> str:
    """What is wrong with a .env file, for the person who wrote it; empty when nothing is."""
    if not (problems := env_file_problems(path)):
        return ""
    return (f"{path.resolve()} has lines that are not settings:\n" + "\n".join(problems)
            + "\nWrite each as ERNIE_NAME=value (or start it with # to keep it as a note).")


def env_file_problems(path: Path) -> list[str]:
    """Lines of a .env file that are not KEY=VALUE: python-dotenv would skip them silently."""
    if not path.is_file():
        return []
    problems = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#") and not _ENV_LINE.match(line):
            problems.append(f"  line {number}: {line.strip()[:60]!r} is not KEY=VALUE")
    return problems


def env_example(fields: dict) -> str:
    """The text of .env.example: every setting with its meaning and default."""
    lines = ["# ernie-chat settings. Copy to .env and uncomment what you change.",
             "# Every variable can also be set in the environment; the environment wins over .env.",
             "# `./scripts/ernie-chat settings` prints the effective values; this file is made by",
             "# `./scripts/ernie-chat settings --env-example > .env.example`.", ""]
    for name, field in fields.items():
        default = field.default
        shown = "" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        lines += [f"# {field.description}", f"# {env_name(name)}={shown}", ""]
    return "\n".join(lines)
