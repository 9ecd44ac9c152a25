"""Preset personas, offered as Chainlit chat profiles, with starters in both languages.

A persona is only a system prompt and a few example questions: the settings
panel can still change the prompt of any chat.
"""

from __future__ import annotations

from dataclasses import dataclass

import chainlit as cl

from app.engine.model_choice import Engines


@dataclass(frozen=True)
class Persona:
    name: str
    description: str
    system_prompt: str          # None-like "" means: the operator's ERNIE_SYSTEM_PROMPT
    starters: dict[str, list[tuple[str, str]]]  # lang -> [(label, message)]


PERSONAS = [
    Persona("Assistant", "A helpful general assistant (uses ERNIE_SYSTEM_PROMPT).", "", {
        "en": [("Weather", "What's the weather like today?"),
               ("Explain KV cache", "Explain what a KV cache is in two sentences.")],
        "zh": [("天气", "今天天气怎么样？"), ("KV 缓存", "用两句话解释什么是 KV 缓存。")],
    }),
    Persona("Translator", "Translates between Chinese and English.",
            "You are a translator. Translate the user's text between Chinese and English, "
            "and reply with the translation only.", {
        "en": [("Translate", "Translate: The weather is nice today.")],
        "zh": [("翻译", "翻译：今天天气很好。")],
    }),
    Persona("Tutor", "Explains step by step, asks a question back.",
            "You are a patient tutor. Explain step by step in simple words, then ask one "
            "question to check understanding.", {
        "en": [("Study tip", "How should I prepare for an exam in two weeks?")],
        "zh": [("学习方法", "两周后考试，我应该怎么复习？")],
    }),
]


def persona(name: str | None) -> Persona:
    return next((p for p in PERSONAS if p.name == name), PERSONAS[0])


def starters(chosen: Persona, lang: str) -> list[cl.Starter]:
    return [cl.Starter(label=label, message=message) for label, message in chosen.starters[lang]]


def chat_profiles(lang: str) -> list[cl.ChatProfile]:
    return [cl.ChatProfile(name=p.name, markdown_description=p.description, default=(i == 0),
                           starters=starters(p, lang))
            for i, p in enumerate(PERSONAS)]


def profiles(engines: Engines, lang: str) -> list[cl.ChatProfile]:
    """The chat profiles: with several models the model picker, one profile per served model
    with its window and recent speed; with one, the personas."""
    if not engines.several:
        return chat_profiles(lang)
    return [cl.ChatProfile(name=engine.name, markdown_description=engine.describe(lang), default=(i == 0),
                           starters=starters(PERSONAS[0], lang))
            for i, engine in enumerate(engines.all)]
