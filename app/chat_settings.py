"""The settings panel: system prompt, temperature, top_p and max tokens for one chat.

Defaults come from the settings class (ERNIE_*), or the chat profile's persona
for the system prompt.  The max-tokens slider stops at what the context window
leaves after the system prompt; each request is fitted again anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import chainlit as cl
from chainlit.input_widget import Slider, TextInput

from app.history import MIN_REPLY_TOKENS
from server.settings import Settings


@dataclass
class ChatParams:
    system_prompt: str
    temperature: float
    top_p: float
    max_tokens: int


def default_params(settings: Settings, system_prompt: str) -> ChatParams:
    return ChatParams(system_prompt or settings.system_prompt, settings.temperature,
                      settings.top_p, settings.max_tokens)


def panel(params: ChatParams, max_reply_tokens: int, lang: str) -> cl.ChatSettings:
    zh = lang == "zh"
    return cl.ChatSettings([
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
    ])


def apply(values: dict, params: ChatParams, max_reply_tokens: int) -> ChatParams:
    """New params from the panel's values, clamped to what the engine accepts."""
    return ChatParams(
        system_prompt=str(values.get("system_prompt", params.system_prompt)),
        temperature=min(2.0, max(0.0, float(values.get("temperature", params.temperature)))),
        top_p=min(1.0, max(0.05, float(values.get("top_p", params.top_p)))),
        max_tokens=min(max_reply_tokens, max(MIN_REPLY_TOKENS, int(values.get("max_tokens", params.max_tokens)))),
    )
