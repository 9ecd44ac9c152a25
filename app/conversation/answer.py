"""A message answered: its files' text put into the prompt, the prompt fitted to the model's
window, the reply streamed while it is kept for another process (app/conversation/in_flight.py),
then shown with its figures and with Regenerate under it.

Also a reply another process left, carried on here (``resumed``: app/kept/carry_over.py).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from pathlib import Path
from typing import Optional

import chainlit as cl
from chainlit.config import config as chainlit_config

from app import chat_metrics, chat_records
from app.conversation import export, in_flight, regenerate, switcher
from app.conversation.admission import spend_tokens
from app.conversation.attachments import Attachment, Refused, prompt_with, read_files
from app.conversation.chat_settings import ChatParams, sampling_extra
from app.conversation.chat_state import engine_model
from app.conversation.file_readers import Busy, Readers
from app.conversation.history import Conversation, TooLong, Turn
from app.conversation.math_text import DisplayStream, display_text
from app.conversation.notices import lang, login_name, notice, say_error, say_waiting, show_error
from app.conversation.pdf_reader import PdfLimits
from app.conversation.prompt_budget import Reply
from app.conversation.token_batcher import STREAMING, TokenBatcher, engine_piece_tokens
from app.engine import engine_client as ec
from app.engine import failover, model_choice, server_info, token_count
from app.engine.recent_replies import RECENT
from app.texts import FIGURES_MARK, figures_line, refusal, text
from app.worker import ENGINES, HTTP, SETTINGS
from server.engine_state import may_come_back

# [features.spontaneous_file_upload] in .chainlit/config.toml; the server counts MiB.
UPLOADS = chainlit_config.features.spontaneous_file_upload
MAX_UPLOAD_BYTES = UPLOADS.max_size_mb * 2**20
# A PDF's text is capped at the upload limit too: more could never fit a prompt.
PDF_LIMITS = PdfLimits(SETTINGS.pdf_max_pages, SETTINGS.pdf_memory_mb, SETTINGS.pdf_timeout_s,
                       MAX_UPLOAD_BYTES)
READERS = Readers()


def clean_text(text: str) -> str:
    """What the engine can take: lone UTF-16 surrogates (a broken paste) become U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


async def with_attachments(message: cl.Message, typed: str) -> Optional[str]:
    """``typed`` as the model gets it, with the message's files' text; None when a file is refused,
    or when the readers are busy (then the files stay, for the message sent again)."""
    files = [(e.name, e.mime or "", Path(e.path)) for e in message.elements or () if e.path]
    if not files:
        return typed
    known: dict[Path, Attachment] = cl.user_session.get("files_read")
    try:
        attached, refused = await READERS.run(lambda: read_then_delete(files, known))
    except Busy:
        await show_error(text(lang(), "files_busy"), "files_busy")
        return None
    known.update(attached)
    forget_uploads({path for _, _, path in files})
    if refused:
        await show_error(refusal(lang(), refused), "files_refused")
        return None
    for attachment in attached.values():
        if attachment.decoded_from_legacy:
            await notice(text(lang(), "file_decoded", name=attachment.name, encoding=attachment.encoding))
    return clean_text(prompt_with(typed, list(attached.values())))


def read_then_delete(files: list[tuple[str, str, Path]],
                     known: dict[Path, Attachment]) -> tuple[dict[Path, Attachment], list[Refused]]:
    """On a reader thread: the files' text, then the files gone from disk.  A read file's text is
    in the conversation from then on (and in ``known``, for an edit of its message); a refused
    one could never go in.  Kept, they would wait for the chat's end, an hour after its browser
    left."""
    outcome = read_files(files, MAX_UPLOAD_BYTES, UPLOADS.max_files, PDF_LIMITS, known)
    for _, _, path in files:
        path.unlink(missing_ok=True)
    return outcome


def forget_uploads(deleted: set[Path]) -> None:
    """Chainlit's list of the chat's uploads without the deleted files: a link to one answers
    404 rather than failing on the missing file, and a message naming one again names nothing."""
    uploads = cl.context.session.files
    for file_id in [i for i, upload in uploads.items() if Path(upload["path"]) in deleted]:
        del uploads[file_id]


async def answer(message_id: str, user_text: str, store: in_flight.ReplyStore, too_long: str = "too_long",
                 resumed: Optional[in_flight.Partial] = None) -> None:
    """Answer a new, edited or regenerated message, or carry on a reply another process left
    (``resumed``), then offer Regenerate under the outcome; ``store`` keeps the reply while it
    streams, and the history after it."""
    try:
        await _answer(message_id, user_text, store, too_long, resumed)
    finally:
        store.keep(cl.user_session.get("conversation"), cl.user_session.get("params"))


async def _answer(message_id: str, user_text: str, store: in_flight.ReplyStore, too_long: str,
                  resumed: Optional[in_flight.Partial]) -> None:
    conversation: Conversation = cl.user_session.get("conversation")
    params: ChatParams = cl.user_session.get("params")
    await switcher.answering(conversation, message_id)  # an edit or a regeneration keeps the old turn
    conversation.ask(message_id, user_text)  # and the model forgets it
    chosen = ENGINES.current()
    if loading := chosen.wake(lang()):  # an asleep model starts (server/stack/on_demand.py)
        await notice(loading, "model_loading")

    async def prepared():
        model, max_len = await engine_model()
        fitted = await cl.user_session.get("budget").fit(
            conversation, user_text, _counter(model), model, max_len, params.max_tokens)
        carried = resumed and await in_flight.with_tokens(resumed, _counter(model), fitted.messages,
                                                          fitted.prompt_tokens)
        return model, max_len, fitted, carried
    try:
        # The engine may be restarting: its count waits for it as the reply would (failover).
        model, max_len, fitted, resumed = await failover.when_engine_answers(
            prepared, SETTINGS.continue_wait_s, model_choice.already_told if loading else say_waiting,
            lambda away_s: may_come_back(chosen.state(), away_s))
    except TooLong as exc:
        await show_error(text(lang(), too_long, tokens=exc.tokens, limit=exc.limit), too_long)
        return
    except Exception as exc:
        await say_error(exc)
        await regenerate.offer(lang())
        return
    if fitted.dropped_turns:
        await notice(text(lang(), "dropped", limit=max_len, n=fitted.dropped_turns))
    try:
        await stream_answer(conversation, message_id, user_text, model, fitted.messages,
                            fitted.max_tokens, params, store, resumed)
    finally:
        await regenerate.offer(lang())


async def stream_answer(conversation: Conversation, message_id: str, user_text: str, model: str,
                        messages: list[dict], max_tokens: int, params: ChatParams,
                        store: in_flight.ReplyStore, resumed: Optional[in_flight.Partial] = None) -> None:
    so_far = resumed.text if resumed else ""
    reply = cl.Message(content=so_far, metadata={"kind": "reply"}, id=resumed.step_id if resumed else None)
    # Saved as it streams, so another process can finish it (app/conversation/in_flight.py).
    keeper = in_flight.Keeper(reply, in_flight.marker_now(
        params.temperature, params.top_p, resumed.marker.max_tokens if resumed else max_tokens),
        store, (message_id, user_text))
    batcher = TokenBatcher(DisplayStream(keeper.send, so_far), text=so_far)
    stats = ec.ReplyStats(asked_at=cl.user_session.get("asked_at"))
    # vLLM's own fields go to vLLM only: another server may refuse a field it does not
    # know (transformers serve answers HTTP 422); the seed is the OpenAI API's own.
    vllm = getattr(cl.user_session.get("server"), "kind", server_info.VLLM) == server_info.VLLM
    extra_body = sampling_extra(params, SETTINGS.ignore_eos and vllm) or {}
    if vllm and (group := engine_piece_tokens(STREAMING, SETTINGS.interval_max)) > 1:
        extra_body["stream_interval"] = group  # vLLM's tokens per piece in a crowd (token_batcher)
    if vllm:
        extra_body.update(ec.LIVE_USAGE)  # a reply cut mid-stream goes on from its count (failover)
    chosen = ENGINES.current()
    pieces = RECENT.track(failover.resilient_reply(
        chosen.client, model, messages, stats,
        temperature=params.temperature, top_p=params.top_p, max_tokens=max_tokens,
        extra_body=extra_body or None, can_continue=vllm, wait_s=SETTINGS.continue_wait_s,
        on_wait=say_waiting, shown=so_far, produced=resumed.tokens if resumed else 0,
    ), stats, chosen.name)  # the live page's figures, per model
    try:
        # Leaving the batcher sends what it holds, however the stream ends; leaving
        # aclosing first closes the HTTP stream at once on Stop (engine_client).
        async with keeper, batcher, aclosing(pieces):
            async for piece in pieces:
                await batcher.add(piece)
    except asyncio.CancelledError:
        # Stop: keep what was shown, as a real turn; the notice is not history.
        conversation.add(user_text, batcher.text,
                         dict(export.figures_of(stats, params.seed, ""), finish_reason="stopped"))
        if batcher.text:
            await switcher.send_reply(conversation, message_id, reply, lang())
        await notice(text(lang(), "stopped"))
        raise
    except Exception as exc:
        if batcher.text:
            await reply.send()
        await say_error(exc, mid_reply=stats.first_token_at is not None)
        return
    finally:  # a stopped or broken reply's tokens count too, as far as the engine counted them
        await spend_tokens(stats)
    line = figures_line(lang(), stats, params.seed, taken_over=resumed is not None,
                        model=model if ENGINES.several else None)
    conversation.add(user_text, batcher.text, export.figures_of(stats, params.seed, line))
    # A reply taken over from another process counted its tokens there.
    generated = stats.completion_tokens if resumed is None else None
    cl.user_session.get("budget").sent(stats.prompt_tokens,
                                       Reply(batcher.text, generated) if generated else None)
    STREAMING.finished(stats.tokens_per_s)
    chosen.finished(stats.tokens_per_s)
    chat_metrics.reply_finished(stats.user_ttft_s, stats.tokens_per_s, bool(stats.continued))
    chat_records.reply(SETTINGS.usage_log, stats, login_name())
    reply.content = reply_text(Turn(user_text, batcher.text, {"line": line}))
    await switcher.send_reply(conversation, message_id, reply, lang())


def reply_text(turn: Turn) -> str:
    """A finished reply as the chat shows it: its text, then its figures line if it has one."""
    line = turn.figures.get("line")
    return display_text(turn.assistant) + (FIGURES_MARK + line + "*" if line else "")


def _counter(model: str):
    server: server_info.ServerInfo = cl.user_session.get("server")
    return token_count.counter(HTTP, server.url, model, server.counting, SETTINGS.api_key_value)
