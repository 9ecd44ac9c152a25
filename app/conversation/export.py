"""A chat as files to keep or attach to a bug report: Markdown to read, JSON to replay.

Both hold what the model saw (the conversation's turns, as app/conversation/history.py keeps
them: the version of each turn the chat shows, app/conversation/versions.py),
the settings that shaped the replies and each reply's figures.  The JSON's
``messages`` are in the OpenAI chat format, so a QA tester can send them again.
The texts are built by pure functions; :func:`send` only posts them as files.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone

import chainlit as cl

from app.conversation.chat_settings import ChatParams
from app.conversation.history import Conversation
from app.texts import text


def figures_of(stats, seed, line: str) -> dict:
    """The figures of one reply (an app.engine.engine_client.ReplyStats), with the line the chat showed."""
    return {
        "ttft_ms": None if stats.ttft_s is None else round(stats.ttft_s * 1000, 1),
        "tokens_per_s": None if stats.tokens_per_s is None else round(stats.tokens_per_s, 1),
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "finish_reason": stats.finish_reason,
        "seed": seed,
        "line": line,
    }


def file_stem(when: datetime) -> str:
    return when.strftime("chat-%Y%m%d-%H%M%S")


def as_json(conversation: Conversation, params: ChatParams, model: str, when: datetime) -> str:
    messages = [{"role": "system", "content": conversation.system_prompt}] if conversation.system_prompt else []
    for turn in conversation.turns:
        messages.append({"role": "user", "content": turn.user})
        messages.append({"role": "assistant", "content": turn.assistant, "figures": turn.figures})
    return json.dumps({"exported_at": when.isoformat(timespec="seconds"), "model": model,
                       "settings": asdict(params), "messages": messages},
                      ensure_ascii=False, indent=2) + "\n"


def as_markdown(conversation: Conversation, params: ChatParams, model: str, when: datetime,
                lang: str) -> str:
    seed = "–" if params.seed is None else params.seed
    lines = [f"# {model} · {when.strftime('%Y-%m-%d %H:%M')}", "",
             f"## {text(lang, 'export_settings')}", "",
             f"- {text(lang, 'export_model')}: `{model}`",
             f"- system prompt: {params.system_prompt or '–'}",
             f"- temperature {params.temperature} · top_p {params.top_p} · "
             f"max_tokens {params.max_tokens} · seed {seed}", ""]
    for number, turn in enumerate(conversation.turns, 1):
        lines += [f"## {number}. {text(lang, 'export_you')}", "", turn.user, "",
                  f"## {number}. {model}", "", turn.assistant, ""]
        if turn.figures.get("line"):
            lines += [f"*⏱ {turn.figures['line']}*", ""]
    return "\n".join(lines)


async def send(conversation: Conversation, params: ChatParams, model: str, lang: str) -> None:
    """Post both files in the chat, as downloads (the ``/export`` command)."""
    if not conversation.turns:
        await cl.Message(content=text(lang, "export_empty"), metadata={"kind": "notice"}).send()
        return
    when = datetime.now(timezone.utc)
    stem = file_stem(when)
    files = [cl.File(name=f"{stem}.md", mime="text/markdown", display="inline",
                     content=as_markdown(conversation, params, model, when, lang).encode()),
             cl.File(name=f"{stem}.json", mime="application/json", display="inline",
                     content=as_json(conversation, params, model, when).encode())]
    await cl.Message(content=text(lang, "exported", turns=len(conversation.turns)),
                     elements=files, metadata={"kind": "export"}).send()
