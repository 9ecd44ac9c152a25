"""app/conversation/export.py: a chat as Markdown and JSON, from the conversation the model saw."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from app.conversation.chat_settings import ChatParams
from app.conversation.export import as_json, as_markdown, figures_of, file_stem
from app.conversation.history import Conversation
from app.engine.engine_client import ReplyStats
from app.texts import figures_line

WHEN = datetime(2026, 12, 1, 14, 39, 5, tzinfo=timezone.utc)
PARAMS = ChatParams("You are terse.", 0.7, 0.9, 256, seed=42)


def stats() -> ReplyStats:
    return ReplyStats(started=10.0, first_token_at=10.25, finished_at=11.25, prompt_tokens=20,
                      completion_tokens=11, finish_reason="stop")


def conversation() -> Conversation:
    conv = Conversation("You are terse.")
    conv.ask("m1", "What is a KV cache?")
    conv.add("What is a KV cache?", "Keys and values kept per token.",
             figures_of(stats(), 42, figures_line("en", stats(), 42)))
    conv.ask("m2", "你好")
    conv.add("你好", "你好！", figures_of(ReplyStats(started=1.0), None, ""))
    return conv


def test_figures_of_a_reply():
    assert figures_of(stats(), 42, "the line") == {
        "ttft_ms": 250.0, "tokens_per_s": 10.0, "prompt_tokens": 20, "completion_tokens": 11,
        "finish_reason": "stop", "seed": 42, "line": "the line"}


def test_json_holds_messages_settings_and_figures():
    data = json.loads(as_json(conversation(), PARAMS, "ernie-4.5-0.3b", WHEN))
    assert data["exported_at"] == "2026-12-01T14:39:05+00:00"
    assert data["model"] == "ernie-4.5-0.3b"
    assert data["settings"] == {"system_prompt": "You are terse.", "temperature": 0.7, "top_p": 0.9,
                                "max_tokens": 256, "seed": 42}
    roles = [(m["role"], m["content"]) for m in data["messages"]]
    assert roles == [("system", "You are terse."), ("user", "What is a KV cache?"),
                     ("assistant", "Keys and values kept per token."), ("user", "你好"),
                     ("assistant", "你好！")]
    assert data["messages"][2]["figures"]["completion_tokens"] == 11
    assert data["messages"][2]["figures"]["line"].endswith("· seed 42")


def test_json_messages_are_what_the_model_got_after_a_regeneration():
    conv = conversation()
    message_id, user = conv.last_asked()
    conv.ask(message_id, user)
    conv.add(user, "新的回复")
    data = json.loads(as_json(conv, PARAMS, "m", WHEN))
    assert [m["content"] for m in data["messages"] if m["role"] == "assistant"] == [
        "Keys and values kept per token.", "新的回复"]


def test_markdown_reads_like_the_chat():
    md = as_markdown(conversation(), PARAMS, "ernie-4.5-0.3b", WHEN, "en")
    assert md.startswith("# ernie-4.5-0.3b · 2026-12-01 14:39\n")
    assert "- temperature 0.7 · top_p 0.9 · max_tokens 256 · seed 42" in md
    assert "## 1. You\n\nWhat is a KV cache?\n\n## 1. ernie-4.5-0.3b\n\nKeys and values kept per token." in md
    assert "*⏱ 250 ms to first token · 10.0 tok/s · 20 prompt + 11 reply tokens · seed 42*" in md
    assert "## 2. You\n\n你好" in md
    assert md.count("⏱") == 1  # the second reply has no figures line


def test_markdown_in_chinese_and_without_seed():
    md = as_markdown(conversation(), ChatParams("", 0.7, 0.9, 256), "m", WHEN, "zh")
    assert "## 设置" in md and "## 1. 你" in md and "seed –" in md


def test_file_names_sort_by_time():
    assert file_stem(WHEN) == "chat-20261201-143905"
