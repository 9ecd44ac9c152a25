"""The chat's personas from a TOML file (ERNIE_PERSONAS_FILE, or the built-in one).

A persona is a name, a system prompt (left out: the operator's ERNIE_SYSTEM_PROMPT), the
starter prompts a new chat offers, and the chat's languages it shows in.  The file is read
with tomllib (no YAML: no YAML parser is a dependency of the app), its shape checked by
pydantic, and every problem reported with the file and the line it is on: tomllib's own
message carries its line, and a problem of the shape is put on the line of the key, or of
the table, it is about (:func:`key_lines`).

    [[personas]]
    name = "Translator"
    system_prompt = "Translate the user's text between Chinese and English."
    languages = ["en", "zh-CN"]

    [[personas.starters]]
    label = "Translate"
    message = "Translate: The weather is nice today."
    language = "en"
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from server.errors import BadInput

# The chat's own languages (app/texts): Chinese for any zh* browser, English for the rest.
LANGUAGES = ("en", "zh")
NAME_CHARS = 80
LABEL_CHARS = 80

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=NAME_CHARS)]
Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=LABEL_CHARS)]

# pydantic's types in TOML's words.
TYPE_WORDS = {"string_type": "a string", "tuple_type": "a list", "list_type": "a list",
              "model_type": "a table", "dict_type": "a table"}

_TOML_PLACE = re.compile(r"^(?P<message>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$", re.S)
_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\s-]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*[.=]""")


class PersonasFileError(BadInput):
    """A personas file that cannot be used: its message names the file and the line."""


def ui_language(tag: str) -> str:
    """The chat's language for a language tag (en, en-US, zh, zh-CN ...)."""
    primary = tag.strip().lower().replace("_", "-").split("-")[0]
    if primary not in LANGUAGES:
        raise ValueError(f"{tag!r} is not one of the chat's languages (en, zh: English and Chinese, "
                         "with any region such as en-US or zh-CN)")
    return primary


class Starter(BaseModel):
    """A prompt a new chat offers to send, in one language or (left out) all of its persona's."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    label: Label
    message: Text
    language: Optional[str] = None

    @field_validator("language")
    @classmethod
    def _known(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else ui_language(value)


class Persona(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Name
    description: str = ""
    # None: the operator's ERNIE_SYSTEM_PROMPT; given, it must say something.
    system_prompt: Optional[Text] = None
    languages: tuple[str, ...] = Field(LANGUAGES, min_length=1)
    starters: tuple[Starter, ...] = ()

    @field_validator("languages", "starters", mode="before")
    @classmethod
    def _list(cls, value):
        # TOML gives a list; strict mode takes only a tuple for a tuple.
        return tuple(value) if isinstance(value, list) else value

    @field_validator("languages")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(ui_language(tag) for tag in value))

    def shows_in(self, lang: str) -> bool:
        return lang in self.languages

    def starters_in(self, lang: str) -> list[Starter]:
        return [s for s in self.starters if s.language in (None, lang)]


class PersonasFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    personas: list[Persona] = Field(min_length=1)


# --- where each key is: a line for every problem --------------------------------------------------

def key_lines(text: str) -> dict[tuple, int]:
    """The line of each table and key of a personas file, by its path as pydantic names it:
    ``("personas", 0)`` the first ``[[personas]]``, ``("personas", 0, "starters", 1, "label")``
    the label of its second starter.  Lines inside a multi-line string are not keys."""
    lines: dict[tuple, int] = {}
    table: tuple = ()
    counts: dict[tuple, int] = {}
    in_string = ""
    for number, line in enumerate(text.splitlines(), 1):
        if in_string:
            in_string = "" if line.count(in_string) % 2 else in_string
            continue
        if header := _HEADER.match(line):
            table = _table(header.group(2), header.group(1) == "[[", table, counts)
            lines.setdefault(table, number)
        elif key := _KEY.match(line):
            lines.setdefault(table + (key.group(1).strip("\"'"),), number)
        for quotes in ('"""', "'''"):
            if line.count(quotes) % 2:
                in_string = quotes
    return lines


def _table(dotted: str, array: bool, current: tuple, counts: dict[tuple, int]) -> tuple:
    """The path of a table header: in ``[[personas.starters]]``, ``personas`` is the current
    persona (an array's last table, as TOML means it) and the header the next starter."""
    parts = [p.strip() for p in dotted.split(".")]
    path: tuple = ()
    for part in parts[:-1]:
        path += (part,)
        if len(current) > len(path) and current[:len(path)] == path and isinstance(current[len(path)], int):
            path += (current[len(path)],)
    path += (parts[-1],)
    if array:
        counts[path] = counts.get(path, -1) + 1
        path += (counts[path],)
    return path


def line_of(loc: tuple, lines: dict[tuple, int]) -> int:
    """The line of the key or table at ``loc``, or of the nearest table around it."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


# --- reading ------------------------------------------------------------------------------------

def load(path: Path) -> list[Persona]:
    """The file's personas, or :class:`PersonasFileError` naming each problem's line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PersonasFileError(f"{path}: cannot be read as a UTF-8 text file ({exc})") from None
    return parse(text, str(path))


def parse(text: str, name: str) -> list[Persona]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PersonasFileError(_toml_problem(str(exc), name)) from None
    try:
        personas = PersonasFile.model_validate(data).personas
    except ValidationError as exc:
        lines = key_lines(text)
        raise PersonasFileError(_report(name, [(line_of(err["loc"], lines), _problem(err, data))
                                               for err in exc.errors()])) from None
    if problems := agreement_problems(personas):
        lines = key_lines(text)
        raise PersonasFileError(_report(name, [(line_of(loc, lines), message) for loc, message in problems]))
    return personas


def agreement_problems(personas: list[Persona]) -> list[tuple[tuple, str]]:
    """What the personas' types allow but the menu cannot show: two of one name, a starter in
    a language its persona does not show in."""
    problems, seen = [], {}
    for i, persona in enumerate(personas):
        if persona.name in seen:
            problems.append((("personas", i, "name"), f"persona {persona.name!r}: the name of persona "
                             f"{seen[persona.name] + 1} too; each persona needs a name of its own"))
        seen.setdefault(persona.name, i)
        for j, starter in enumerate(persona.starters):
            if starter.language is not None and not persona.shows_in(starter.language):
                problems.append((("personas", i, "starters", j, "language"),
                                 f"persona {persona.name!r}: starter {starter.label!r} is in "
                                 f"{starter.language!r}, not one of the persona's languages "
                                 f"({', '.join(persona.languages)})"))
    return problems


def _toml_problem(message: str, name: str) -> str:
    place = _TOML_PLACE.match(message)
    if place is None:
        return f"{name}: not valid TOML: {message}"
    return f"{name}, line {place['line']}, column {place['column']}: not valid TOML: {place['message']}"


def _problem(err: dict, data: dict) -> str:
    """One of pydantic's errors in the words of the file: which persona and starter, which key."""
    loc, kind = err["loc"], err["type"]
    if loc == ("personas",) and kind in ("missing", "too_short"):
        return "no personas: the file needs at least one [[personas]] table"
    where, key = _whose(loc, data), loc[-1]
    if kind == "extra_forbidden":
        allowed = Starter if "starters" in loc else Persona if loc[:1] == ("personas",) else PersonasFile
        return f"{where}unknown key {key!r} (allowed: {', '.join(allowed.model_fields)})"
    if kind == "missing":
        return f"{where}no {key!r}"
    field = next(part for part in reversed(loc) if isinstance(part, str))
    if kind in ("string_too_short", "too_short"):
        return f"{where}{field} is empty"
    if kind in TYPE_WORDS:
        return f"{where}{field} should be {TYPE_WORDS[kind]}, not {err['input']!r}"
    return f"{where}{field}: {err['msg'].removeprefix('Value error, ')}"


def _whose(loc: tuple, data: dict) -> str:
    """``persona 'Tutor': `` (its number where it has no name), and ``starter 2: `` for a
    problem inside one."""
    if len(loc) < 3 or loc[0] != "personas" or not isinstance(loc[1], int):
        return ""
    entries = data.get("personas")
    entry = entries[loc[1]] if isinstance(entries, list) and loc[1] < len(entries) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    where = f"persona {name.strip()!r}: " if isinstance(name, str) and name.strip() else f"persona {loc[1] + 1}: "
    if len(loc) > 4 and loc[2] == "starters" and isinstance(loc[3], int):
        where += f"starter {loc[3] + 1}: "
    return where


def _report(name: str, problems: list[tuple[int, str]]) -> str:
    return "\n".join(f"{name}, line {line}: {message}" for line, message in sorted(problems))
