"""The settings panel: system prompt, temperature, top_p, max tokens and seed for one chat.

Defaults come from the settings class (ERNIE_*), or the chat profile's persona
for the system prompt.  With several models the chat profiles pick the model, so
the panel offers the personas instead: choosing one sets the system prompt, which
can still be edited after.  The max-tokens slider stops at what the context window
leaves after the system prompt; each request is fitted again anyway.  A seed makes
replies reproducible for QA: vLLM seeds each request's sampler with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import chainlit as cl
from chainlit.input_widget import Select, Slider, TextInput

from app.conversation.history import MIN_REPLY_TOKENS
from app.conversation.personas import PERSONAS, offered, persona
from app.texts import text
from server.settings import Settings

MAX_SEED = 2**32 - 1


@dataclass
class ChatParams:
    system_prompt: str
    temperature: float
    top_p: float
    max_tokens: int
    seed: Optional[int] = None  # None: a new random reply every time


class BadSeed(ValueError):
    def __init__(self, value: str):
        super().__init__(value)
        self.value = value


def default_params(settings: Settings, system_prompt: str) -> ChatParams:
    return ChatParams(system_prompt or settings.system_prompt, settings.temperature,
                      settings.top_p, settings.max_tokens)


def persona_of(system_prompt: str, default_prompt: str) -> str:
    """The persona whose system prompt this is (the first, whose prompt is the operator's, for
    the default or an edited one)."""
    return next((p.name for p in PERSONAS if (p.system_prompt or default_prompt) == system_prompt),
                PERSONAS[0].name)


def persona_choice(params: ChatParams, default_prompt: str, lang: str) -> Select:
    return Select(id="persona", label=text(lang, "persona_label"), values=[p.name for p in offered(lang)],
                  initial_value=persona_of(params.system_prompt, default_prompt))


def panel(params: ChatParams, max_reply_tokens: int, lang: str,
          default_prompt: Optional[str] = None) -> cl.ChatSettings:
    """The panel; with ``default_prompt`` (several models: the personas are not the profiles)
    the persona choice first."""
    zh = lang == "zh"
    choice = [] if default_prompt is None else [persona_choice(params, default_prompt, lang)]
    return cl.ChatSettings(choice + [
        TextInput(id="system_prompt", label="系统提示词" if zh else "System prompt",
                  initial=params.system_prompt, multiline=True),
        Slider(id="temperature", label="温度 (temperature)" if zh else "Temperature",
               initial=params.temperature, min=0, max=2, step=0.05),
        Slider(id="top_p", label="Top-p", initial=params.top_p, min=0.05, max=1, step=0.05),
        Slider(id="max_tokens", label="最长回复 (token)" if zh else "Max reply tokens",
               initial=min(params.max_tokens, max_reply_tokens), min=MIN_REPLY_TOKENS,
               max=max_reply_tokens, step=MIN_REPLY_TOKENS,
               description=("上限为上下文窗口减去系统提示词" if zh else
                            "At most the context window minus the system prompt")),
        TextInput(id="seed", label=text(lang, "seed_label"), description=text(lang, "seed_help"),
                  initial="" if params.seed is None else str(params.seed)),
    ])


def parse_seed(value) -> Optional[int]:
    """'' means no seed; otherwise a whole number from 0 to MAX_SEED, or :class:`BadSeed`."""
    shown = str(value if value is not None else "").strip()
    if not shown:
        return None
    if not shown.isdigit() or int(shown) > MAX_SEED:
        raise BadSeed(shown)
    return int(shown)


def chosen_prompt(values: dict, params: ChatParams, default_prompt: str) -> str:
    """The system prompt the panel's values ask for: a persona chosen anew brings its own
    (the browser sends every value on any change; a name it forges is the first persona);
    otherwise the prompt as typed."""
    if "persona" in values and str(values["persona"]) != persona_of(params.system_prompt, default_prompt):
        return persona(str(values["persona"])).system_prompt or default_prompt
    return str(values.get("system_prompt", params.system_prompt))


def apply(values: dict, params: ChatParams, max_reply_tokens: int, default_prompt: str = "") -> ChatParams:
    """New params from the panel's values, clamped to what the engine accepts.

    Raises :class:`BadSeed` for a seed that is not a whole number in range: nothing is
    applied then, and the panel still shows what the user typed.
    """
    return ChatParams(
        system_prompt=chosen_prompt(values, params, default_prompt),
        temperature=min(2.0, max(0.0, float(values.get("temperature", params.temperature)))),
        top_p=min(1.0, max(0.05, float(values.get("top_p", params.top_p)))),
        max_tokens=min(max_reply_tokens, max(MIN_REPLY_TOKENS, int(values.get("max_tokens", params.max_tokens)))),
        seed=parse_seed(values["seed"]) if "seed" in values else params.seed,
    )


def restored(saved: dict, params: ChatParams, max_reply_tokens: int) -> ChatParams:
    """The params a saved chat was made with, from its panel's values (the thread's metadata,
    ``chat_settings``); values that no longer apply leave the defaults."""
    # The prompt saved is the one the chat had, edited after its persona or not.
    try:
        return apply({k: v for k, v in saved.items() if k != "persona"}, params, max_reply_tokens)
    except (ValueError, TypeError):  # BadSeed is a ValueError
        return params


def sampling_extra(params: ChatParams, ignore_eos: bool) -> Optional[dict]:
    """Sampling fields beyond the client's arguments (extra_body): the seed (the OpenAI
    API's own) and ignore_eos (vLLM's, for load tests)."""
    extra = {"seed": params.seed} if params.seed is not None else {}
    if ignore_eos:
        extra["ignore_eos"] = True
    return extra or None
