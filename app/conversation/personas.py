"""The personas, offered as Chainlit chat profiles with their starters in the browser's language.

A persona is only a system prompt and a few example questions: the settings panel can still
change the prompt of any chat.  They come from ERNIE_PERSONAS_FILE, or the built-in
``personas.toml`` next to this module (both read by server/personas_file.py, checked when
the settings load).  A language no persona names gets them all.
"""

from __future__ import annotations

from pathlib import Path

import chainlit as cl

from app.engine.model_choice import Engines
from app.worker import SETTINGS
from server.personas_file import Persona, load

BUILT_IN = Path(__file__).with_name("personas.toml")
PERSONAS: list[Persona] = load(SETTINGS.personas_file or BUILT_IN)


def offered(lang: str, personas: list[Persona] = PERSONAS) -> list[Persona]:
    """The personas for the chat's language (``en``, ``zh``), the first the default."""
    return [p for p in personas if p.shows_in(lang)] or personas


def persona(name: str | None) -> Persona:
    return next((p for p in PERSONAS if p.name == name), PERSONAS[0])


def starters(chosen: Persona, lang: str) -> list[cl.Starter]:
    return [cl.Starter(label=s.label, message=s.message) for s in chosen.starters_in(lang)]


def chat_profiles(lang: str) -> list[cl.ChatProfile]:
    return [cl.ChatProfile(name=p.name, markdown_description=p.description, default=(i == 0),
                           starters=starters(p, lang))
            for i, p in enumerate(offered(lang))]


def profiles(engines: Engines, lang: str) -> list[cl.ChatProfile]:
    """The chat profiles: with several models the model picker, one profile per served model
    with its window and recent speed; with one, the personas."""
    if not engines.several:
        return chat_profiles(lang)
    return [cl.ChatProfile(name=engine.name, markdown_description=engine.describe(lang), default=(i == 0),
                           starters=starters(offered(lang)[0], lang))
            for i, engine in enumerate(engines.all)]
