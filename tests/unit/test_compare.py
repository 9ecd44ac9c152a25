"""app/conversation/compare.py's pure parts: the command, its refusals, the columns' props, the Markdown a
saved chat keeps, and the frames' pace.  The comparison against two real vLLMs and a real
Chromium is tests/models/test_compare_stack.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.conversation.compare import (DONE, EVERY_S, FAILED, STOPPED, STREAMING_STATE, Column, Frames,
                                      markdown, props, question_of, refusal)
from app.engine.engine_client import ReplyStats
from app.texts import figures_line, text

COMMAND = "/compare"


@pytest.mark.parametrize("content, question", [
    ("/compare What is rain?", "What is rain?"),
    ("  /compare   What is rain?  ", "What is rain?"),
    ("/compare\nline one\nline two", "line one\nline two"),
    ("/compare", ""),
    ("/compare   ", ""),
])
def test_a_compare_message_gives_its_question(content, question):
    assert question_of(content, COMMAND) == question


@pytest.mark.parametrize("content", ["What is /compare?", "/compares x", "/comparex", "", "/status", "compare x"])
def test_any_other_message_is_no_comparison(content):
    assert question_of(content, COMMAND) is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_one_model_is_told_it_needs_several_whatever_the_question(lang):
    for question in ("", "Why?"):
        said = refusal(lang, question, several=False, command=COMMAND)
        assert said == text(lang, "compare_needs_models", command=COMMAND)
        assert "ERNIE_MODELS" in said


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_question_is_told_how_to_ask(lang):
    said = refusal(lang, "", several=True, command=COMMAND)
    assert said == text(lang, "compare_usage", command=COMMAND) and COMMAND in said
    assert refusal(lang, "Why?", several=True, command=COMMAND) is None


def finished(model: str, reply: str, completion: int = 5) -> Column:
    stats = ReplyStats(started=10.0, first_token_at=10.25, finished_at=11.25, prompt_tokens=12,
                       completion_tokens=completion)
    return Column(model, reply, DONE, figures=figures_line("en", stats))


def test_the_props_hold_each_column_in_order():
    columns = [finished("ernie-a", "Rain falls."), Column("ernie-b", "It", STREAMING_STATE)]
    shown = props(columns)["columns"]
    assert [c["model"] for c in shown] == ["ernie-a", "ernie-b"]
    assert shown[0]["figures"] == "250 ms to first token · 4.0 tok/s · 12 prompt + 5 reply tokens"
    assert shown[1] == {"model": "ernie-b", "text": "It", "state": STREAMING_STATE, "figures": "", "note": ""}


def test_the_markdown_has_the_question_each_model_its_reply_and_figures():
    columns = [finished("ernie-a", "Rain falls.\n\nFrom clouds."),
               Column("ernie-b", "Half a rep", STOPPED, note=text("en", "compare_stopped")),
               Column("ernie-c", "", FAILED, note="Your message is 900 tokens long")]
    shown = markdown("en", COMMAND, "What is rain?", columns)
    assert shown.startswith(text("en", "compare_title", command=COMMAND, question="What is rain?"))
    assert text("en", "compare_not_history") in shown
    a, b, c = (shown.index(f"### ernie-{x}") for x in "abc")
    assert a < b < c
    assert "Rain falls.\n\nFrom clouds." in shown[a:b]
    assert "*⏱ 250 ms to first token · 4.0 tok/s · 12 prompt + 5 reply tokens*" in shown[a:b]
    assert "Half a rep" in shown[b:c] and "Stopped" in shown[b:c] and "⏱" not in shown[b:c]
    assert "–" in shown[c:] and "900 tokens long" in shown[c:]


async def test_frames_go_at_most_every_interval_and_the_last_state_goes_on_leaving():
    sent: list[int] = []
    state = {"n": 0}

    async def send() -> None:
        sent.append(state["n"])

    started = time.monotonic()
    async with Frames(send, lambda: 0) as frames:
        for n in range(1, 101):  # 100 changes in ~0.5 s
            state["n"] = n
            frames.changed()
            await asyncio.sleep(0.005)
    elapsed = time.monotonic() - started
    assert sent[-1] == 100, "the last state must be sent"
    assert len(sent) <= elapsed / EVERY_S + 2, (len(sent), elapsed)
    assert len(sent) >= 3, "the columns must move while they stream"


async def test_no_change_sends_only_the_last_frame():
    sent: list[str] = []

    async def send() -> None:
        sent.append("frame")

    async with Frames(send, lambda: 0):
        await asyncio.sleep(0.3)
    assert sent == ["frame"]


async def test_a_model_asleep_on_demand_is_not_woken_by_a_comparison(tmp_path):
    from openai import AsyncOpenAI

    from app.conversation.chat_settings import ChatParams
    from app.conversation.compare import ASLEEP, Job, _column
    from app.engine.model_choice import Engines
    from server.engine_state import write_state
    from server.model_wake import used_path
    from server.settings import load_settings

    settings = load_settings(models="demo,demo-small", log_file=tmp_path / "llm.log", kv_cache_gib=None)
    write_state(settings, "asleep", model="demo-small")
    engines = Engines(settings, lambda view: AsyncOpenAI(base_url=view.engine_base_url, api_key="x"),
                      lambda view: None)
    spent = []

    async def spend(stats):
        spent.append(stats)
    job = Job(engines.all, None, settings, ChatParams("", 0.7, 0.9, 64), "en", COMMAND, spend, None)
    column = Column("demo-small")
    await _column(engines.all[1], column, "What is rain?", job, lambda: None)
    assert (column.state, column.note) == (ASLEEP, text("en", "compare_asleep"))
    assert not spent  # no request was made
    assert not used_path(settings, "demo-small").exists()  # nor was the model asked to start
    await engines.close()
