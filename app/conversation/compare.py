"""``/compare <question>``: one question to every served model at once, their replies side by side.

With ERNIE_MODELS each served model (app/engine/model_choice.py) gets the question as a conversation
of its own: the chat's system prompt, then the question, fitted to that model's window with
its own count (``history.fit``: the reply's budget shrinks to what the window leaves).  The
replies stream concurrently into one message, whose Chainlit custom element
(public/elements/CompareColumns.jsx) shows a column per model: its name, its text and, once
it ends, its figures (``figures_line``, as under a reply).  The element is sent again at
most every ``EVERY_S`` for all the columns together, later in a crowd or for a long text
(``token_batcher.flush_interval``): each frame carries every column's whole text.

A model started on demand and not loaded now (server/stack/on_demand.py) is not woken: its
column says so, since its start would stop a model that is answering.  Each column stands
alone: an engine's error, or a question too long for its window, ends
that column with the error's text, the others go on.  Stop cancels the message's task,
which cancels every column: leaving ``aclosing`` closes each HTTP stream at once, so each
engine aborts its request, and each column keeps its text and says it stopped.

A comparison is not a turn of the chat's conversation (its model never sees it).  Once it
ends, the message's text becomes the comparison in Markdown (``markdown``): the saved chat
keeps that, since Chainlit's SQL data layer keeps no element without a blob store, so a
reopened chat and a shared page show it; the chat's CSS hides it beside the live columns.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from dataclasses import asdict, dataclass
from typing import Awaitable, Callable, Optional, Sequence

import chainlit as cl
import httpx

from app import chat_metrics, chat_records
from app.conversation.chat_settings import ChatParams, sampling_extra
from app.conversation.history import Conversation, TooLong, fit
from app.conversation.math_text import display_text
from app.conversation.token_batcher import STREAMING, flush_interval
from app.engine import engine_client as ec
from app.engine import server_info, token_count
from app.engine.model_choice import Engine
from app.texts import FIGURES_MARK, figures_line, text
from server.settings import Settings

ELEMENT = "CompareColumns"  # public/elements/CompareColumns.jsx
# At most ten frames a second for all the columns: each carries every column's text.
EVERY_S = 0.1
STREAMING_STATE, DONE, STOPPED, FAILED, ASLEEP = "streaming", "done", "stopped", "error", "asleep"


def question_of(content: str, command: str) -> Optional[str]:
    """The question of a ``command`` message ("" when it has none); None for any other message."""
    parts = content.strip().split(maxsplit=1)
    if not parts or parts[0] != command:
        return None
    return parts[1].strip() if len(parts) > 1 else ""


def refusal(lang: str, question: str, several: bool, command: str) -> Optional[str]:
    """Why ``question`` cannot be compared here (no question, one model); None when it can."""
    if not several:
        return text(lang, "compare_needs_models", command=command)
    return None if question else text(lang, "compare_usage", command=command)


@dataclass
class Column:
    """One model's reply as its column shows it."""

    model: str
    text: str = ""
    state: str = STREAMING_STATE
    figures: str = ""  # the figures line, once the reply ended
    note: str = ""  # why it ended early: its error, or that it was stopped


def props(columns: Sequence[Column]) -> dict:
    """The custom element's props: the columns, in the served models' order."""
    return {"columns": [asdict(column) for column in columns]}


def markdown(lang: str, command: str, question: str, columns: Sequence[Column]) -> str:
    """The comparison as Markdown: what a saved chat keeps, and the page shows without the element."""
    parts = [text(lang, "compare_title", command=command, question=question),
             f"*{text(lang, 'compare_not_history')}*"]
    for column in columns:
        parts.append(f"### {column.model}\n\n{display_text(column.text) or '–'}")
        if column.note:
            parts.append(f"*{column.note}*")
        if column.figures:
            parts.append(FIGURES_MARK.lstrip() + column.figures + "*")
    return "\n\n".join(parts)


@dataclass
class Job:
    """What a comparison takes from the chat that asks it."""

    engines: Sequence[Engine]
    http: httpx.AsyncClient  # for /tokenize and what each server is
    settings: Settings
    params: ChatParams  # the chat's system prompt and sampling
    lang: str
    command: str
    spend: Callable[[ec.ReplyStats], Awaitable[None]]  # a reply's tokens on its user's day
    login: Optional[str]  # for the usage log
    asked_at: Optional[float] = None


class Frames:
    """Sends the element again once something changed, at most every ``EVERY_S`` (longer for
    a long text or a crowd); ``async with``: leaving sends the last state."""

    def __init__(self, send: Callable[[], Awaitable[None]], size: Callable[[], int]) -> None:
        self._send, self._size = send, size
        self._changed = asyncio.Event()
        self._task: Optional[asyncio.Task] = None

    def changed(self) -> None:
        self._changed.set()

    async def _run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            await self._send()
            await asyncio.sleep(flush_interval(STREAMING.count, self._size(), EVERY_S))

    async def __aenter__(self) -> "Frames":
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        await self._send()


async def run(question: str, job: Job, asked: Optional[str] = None) -> None:
    """Ask every model ``question`` at once and stream their replies side by side; ``asked``,
    when files came with it, is what the models get: the question with the files' text, which
    the comparison's title leaves out, as the chat shows a message's files as chips."""
    asked = asked or question
    columns = [Column(engine.name) for engine in job.engines]
    element = cl.CustomElement(name=ELEMENT, props=props(columns), display="inline")
    message = cl.Message(content="", elements=[element], metadata={"kind": "compare"})
    await message.send()
    # Later frames carry only the new props: an updatable element is written to a new file of
    # the session (and offered to the data layer) on every send (Chainlit's Element._create).
    element.updatable = False

    async def send() -> None:
        element.props = props(columns)
        await element.send(message.id)
    try:
        async with Frames(send, lambda: sum(len(column.text) for column in columns)) as frames:
            await asyncio.gather(*(_column(engine, column, asked, job, frames.changed)
                                   for engine, column in zip(job.engines, columns)))
    finally:
        message.content = markdown(job.lang, job.command, question, columns)
        await message.update()


async def _column(engine: Engine, column: Column, question: str, job: Job,
                  changed: Callable[[], None]) -> None:
    """One model's reply into its column; its errors end the column, not the comparison."""
    if engine.asleep():  # on demand and not loaded: waking it would stop one that answers
        column.state, column.note = ASLEEP, text(job.lang, "compare_asleep")
        return
    stats = ec.ReplyStats(asked_at=job.asked_at)
    try:
        pieces = await _reply(engine, question, job, stats)
        async with aclosing(pieces):  # Stop closes the HTTP stream at once (engine_client)
            async for piece in pieces:
                column.text += piece
                changed()
    except asyncio.CancelledError:
        column.state, column.note = STOPPED, text(job.lang, "compare_stopped")
        raise
    except TooLong as exc:
        _failed(column, job, "too_long", text(job.lang, "too_long", tokens=exc.tokens, limit=exc.limit))
        return
    except Exception as exc:
        engine.server.forget()  # it may come back with other figures
        kind = ec.error_kind(exc)
        kind = "server_too_long" if kind == "too_long" else kind
        _failed(column, job, kind, engine.error_text(job.lang, kind, exc))
        return
    finally:
        changed()
        await job.spend(stats)  # a stopped or broken reply's tokens count too
    column.state, column.figures = DONE, figures_line(job.lang, stats, job.params.seed)
    engine.finished(stats.tokens_per_s)
    chat_metrics.reply_finished(stats.user_ttft_s, stats.tokens_per_s, bool(stats.continued))
    chat_records.reply(job.settings.usage_log, stats, job.login)


def _failed(column: Column, job: Job, kind: str, note: str) -> None:
    column.state, column.note = FAILED, note
    chat_records.error(job.settings.usage_log, kind, job.login)
    chat_metrics.error_shown(kind)


async def _reply(engine: Engine, question: str, job: Job, stats: ec.ReplyStats):
    """The reply's stream from ``engine``: the question alone after the system prompt, its
    budget what the model's window leaves (raises TooLong when the question does not fit)."""
    server = await engine.server.get(lambda: server_info.probe(engine.client, job.http, engine.settings))
    count = token_count.counter(job.http, server.url, server.model, server.counting,
                                job.settings.api_key_value)
    fitted = await fit(Conversation(job.params.system_prompt), question, count, server.window,
                       job.params.max_tokens)
    vllm = server.kind == server_info.VLLM
    extra_body = sampling_extra(job.params, job.settings.ignore_eos and vllm) or {}
    if vllm:
        extra_body.update(ec.LIVE_USAGE)  # a stopped reply's tokens are counted as far as they came
    stats.started = time.perf_counter()  # the request, after the count
    return ec.stream_reply(engine.client, server.model, fitted.messages, stats,
                           temperature=job.params.temperature, top_p=job.params.top_p,
                           max_tokens=fitted.max_tokens, extra_body=extra_body or None)
