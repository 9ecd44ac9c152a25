"""The Chainlit chat: streams replies from the engine, fitted to its context window.

Run by the supervisor as ``python -m app.serve run app/chat.py --headless`` (Chainlit's
CLI without nest_asyncio: app/serve.py).  The handlers stay thin: streaming, history
fitting, texts, personas, the settings panel, saved chats, attached files, export and
Regenerate with the earlier versions it keeps live in their own modules; what every chat of
the worker shares in app/worker.py, the chat's notices and errors in app/conversation/notices.py, the
limits in app/conversation/admission.py and the typed commands (/status, /compare ...) in app/commands.py.

Only real exchanges enter the model's history (:class:`Conversation`).  Every
other message the chat shows (welcome, notices, errors, figures) is marked
``metadata={"kind": ...}`` so a resumed chat can tell them apart.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path
from typing import Optional

import chainlit as cl
from chainlit.config import config as chainlit_config

import app.web.chainlit_speed  # noqa: F401  (Chainlit without its 1 ms sleeps, before any message)
from app import chat_metrics, commands
from app.auth import auth_sessions, login, oidc
from app.conversation import export, in_flight, regenerate, switcher
from app.conversation.admission import admitted, spend_tokens
from app.conversation.attachments import prompt_with, read_files
from app.conversation.chat_settings import (BadSeed, ChatParams, MAX_SEED, apply, default_params, panel,
                                            restored, sampling_extra)
from app.conversation.history import MIN_REPLY_TOKENS, Conversation, TooLong, Turn
from app.conversation.math_text import DisplayStream, display_text
from app.conversation.notices import (lang, login_name, notice, notices_after, say_error, say_waiting,
                                      show_error)
from app.conversation.pdf_reader import PdfLimits
from app.conversation.personas import persona, profiles
from app.conversation.prompt_budget import PromptBudget
from app.conversation.token_batcher import STREAMING, TokenBatcher, engine_piece_tokens
from app.engine import engine_client as ec
from app.engine import failover, model_choice, server_info, token_count
from app.engine.recent_replies import RECENT
from app.kept import chat_files, chat_search, drain, saved_chats
from app.pages import admin_page, live_page, share_page
from app.texts import FIGURES_MARK, figures_line, lang_of, refusal, text
from app.web import (boot_cookie, files_dir, origins, page_policy, served_files, session_guard, session_tasks,
                     upload_check, upload_limit)
from app.worker import ENGINES, HTTP, SETTINGS
from server import chat_db
from server.demo_stamp import is_demo_model
from server.engine_state import may_come_back
from server.usage_log import append_usage

drain.install()
admin_page.install(SETTINGS)
live_page.install(ENGINES.all, SETTINGS.api_key_value, SETTINGS.public_url)
RESUME_NOTICE_DELAY_S = 1.0
# Chainlit's Stop handler posts this hard-coded English text; on_stop takes it back so that
# only the chat's own, translated notice remains (docs/notes.md, "Chainlit 2.12").
CHAINLIT_STOP_MESSAGE = "Task manually stopped."
# [features.spontaneous_file_upload] in .chainlit/config.toml; the server counts MiB.
UPLOADS = chainlit_config.features.spontaneous_file_upload
MAX_UPLOAD_BYTES = UPLOADS.max_size_mb * 2**20
# A PDF's text is capped at the upload limit too: more could never fit a prompt.
PDF_LIMITS = PdfLimits(SETTINGS.pdf_max_pages, SETTINGS.pdf_memory_mb, SETTINGS.pdf_timeout_s,
                       MAX_UPLOAD_BYTES)
files_dir.install()
session_guard.install()
upload_check.install()
upload_limit.install(MAX_UPLOAD_BYTES)
served_files.install()
page_policy.install()
origins.install(SETTINGS.allowed_origins)
boot_cookie.install()
in_flight.install()
# Where a reply in flight is kept for another worker to carry on (app/conversation/in_flight.py): the saved
# chat's steps, or without them each live chat's files, which every worker of the box sees.
SAVED_STEPS = saved_chats.SavedSteps()
LIVE_CHATS = None if SETTINGS.chat_db else chat_files.ChatFolder(SETTINGS.live_chats_dir).open()
if LIVE_CHATS is not None:
    LIVE_CHATS.sweep(chainlit_config.project.session_timeout)  # chats of dead workers that never came back
    chat_files.install(LIVE_CHATS)


async def engine_model() -> tuple[str, int]:
    """(served name, context window): the process's recent answer, asked again after a failure."""
    cached = cl.user_session.get("engine_model")
    # A resumed chat gets its session back from JSON: the tuple, but no ServerInfo (docs/notes.md).
    if cached and isinstance(cl.user_session.get("server"), server_info.ServerInfo):
        return cached
    chosen = ENGINES.current()
    server = await chosen.server.get(lambda: server_info.probe(chosen.client, HTTP, chosen.settings))
    cl.user_session.set("server", server)  # what it is, and how it counts tokens
    cl.user_session.set("engine_model", (server.model, server.window))
    cl.user_session.set("is_demo", is_demo_model(server.root))
    return server.model, server.window


# --- chat set-up ---------------------------------------------------------------

@cl.set_chat_profiles
async def set_chat_profiles(user: Optional[cl.User] = None, language: Optional[str] = None):
    return profiles(ENGINES, lang_of(language))


def start_session(conversation: Conversation) -> None:
    cl.user_session.set("conversation", conversation)
    cl.user_session.set("budget", PromptBudget())  # the last prompt's length: few /tokenize calls
    cl.user_session.set("params", default_params(SETTINGS, conversation.system_prompt))


async def send_panel() -> None:
    params: ChatParams = cl.user_session.get("params")
    await panel(params, max_reply_budget(), lang(), SETTINGS.system_prompt if ENGINES.several else None).send()


def max_reply_budget() -> int:
    _, max_len = cl.user_session.get("engine_model") or ("", ENGINES.current().settings.max_model_len)
    return max(MIN_REPLY_TOKENS, max_len - MIN_REPLY_TOKENS)


def moved_here() -> bool:
    """The chat's page came from an app process that is gone (app/web/boot_cookie.py)."""
    environ = cl.context.session.environ or {}
    return boot_cookie.lost_its_process(environ.get("HTTP_COOKIE"))


def live_chat() -> chat_files.ChatFiles:
    """This chat's files (without saved chats): by its session id, for its user."""
    user = cl.context.session.user
    return LIVE_CHATS.chat(cl.context.session.id, user.identifier if user else None)


def reply_store() -> in_flight.ReplyStore:
    return SAVED_STEPS if LIVE_CHATS is None else live_chat()


def remember() -> None:
    """Keep the chat's history where another worker of the box finds it if this one dies;
    saved chats keep it in their database."""
    if LIVE_CHATS is not None:
        live_chat().keep(cl.user_session.get("conversation"), cl.user_session.get("params"))


def carry_over() -> bool:
    """A chat whose worker died, as its files hold it: its history and settings in this
    session, its reply in flight carried on here.  False if they hold nothing of it."""
    chat = live_chat()
    kept = chat.restore()
    if kept is not None:
        cl.user_session.set("conversation", kept.conversation)
        cl.user_session.set("params", kept.params)
        remember()  # this worker writes it from now on
    partial = chat.orphan()
    if partial is not None:
        session_tasks.after_start(take_over(partial, chat))
    return kept is not None or partial is not None


async def take_over(partial: in_flight.Partial, store: in_flight.ReplyStore) -> None:
    """Carry on here a reply another process left, once its writer is quiet; the chat shows
    a reply coming (Stop) meanwhile."""
    async def carry() -> None:
        resumed = await in_flight.wait_for_quiet(partial, store)
        if resumed is None:
            return
        params: ChatParams = cl.user_session.get("params")
        cl.user_session.set("params", replace(params, temperature=resumed.marker.temperature,
                                              top_p=resumed.marker.top_p,
                                              max_tokens=resumed.marker.max_tokens))
        cl.user_session.set("asked_at", time.perf_counter())
        chat_metrics.reply_taken_over()
        await answer(resumed.asked_id, resumed.asked, resumed=resumed)
    session_tasks.start_stoppable(carry)


@cl.on_chat_start
async def on_chat_start() -> None:
    chat_metrics.chat_opened()
    mapped = ENGINES.settle(lang())  # first: a forged profile picks no persona either
    chosen = persona(cl.user_session.get("chat_profile"))
    start_session(Conversation(chosen.system_prompt or SETTINGS.system_prompt))
    if mapped:
        await notice(mapped, "model_unknown")
    if moved_here():
        kept = LIVE_CHATS is not None and carry_over()
        # "kept": the chat goes on with its history and reply (qa-load waits for the reply).
        await notice(text(lang(), "moved_kept" if kept else "moved"), "moved", kept=kept)
    if (engine := ENGINES.current()).asleep():  # its first message starts it: nothing to ask yet
        await send_panel()
        session_tasks.after_start(notice(text(lang(), "model_asleep", model=engine.name), "welcome"))
        return
    try:
        await engine_model()
    except Exception as exc:  # the chat still opens; the message says what is wrong
        await send_panel()
        session_tasks.after_start(say_error(exc))
        return
    await send_panel()
    welcome = (server_info.describe(lang(), cl.user_session.get("server"))
               + "\n\n" + text(lang(), "live_link", path=live_page.PAGE))
    if cl.user_session.get("is_demo"):
        welcome += "\n\n" + text(lang(), "demo")
    session_tasks.after_start(notice(welcome, "welcome"))  # the composer appears when it can send


@cl.on_settings_update
async def on_settings_update(values: dict) -> None:
    try:
        params = apply(values, cl.user_session.get("params"), max_reply_budget(), SETTINGS.system_prompt)
    except BadSeed as exc:
        await show_error(text(lang(), "bad_seed", value=exc.value, max=MAX_SEED), "bad_seed")
        return
    use_params(params)
    if params.system_prompt != str(values.get("system_prompt", params.system_prompt)):
        await send_panel()  # a persona chosen: the prompt field shows its prompt
    if SETTINGS.chat_db is not None:
        await saved_chats.save_settings(cl.context.session)


def use_params(params: ChatParams) -> None:
    cl.user_session.set("params", params)
    cl.user_session.get("conversation").system_prompt = params.system_prompt
    remember()


# --- one message -----------------------------------------------------------------

def clean_text(text: str) -> str:
    """What the engine can take: lone UTF-16 surrogates (a broken paste) become U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


@cl.on_message
async def on_message(message: cl.Message) -> None:
    # Stop must reach this task whatever path started it (docs/notes.md: Chainlit does not
    # register every re-run); on_stop cancels it itself.
    cl.user_session.set("task", asyncio.current_task())
    cl.user_session.set("asked_at", time.perf_counter())  # for the usage log's stamps
    chat_metrics.message_received()
    await regenerate.withdraw()
    if not message.content.strip() and not message.elements:
        await show_error(text(lang(), "empty"), "empty")
        return
    message.content = clean_text(message.content)  # a command's text too
    if await commands.run(message.content, lambda typed: with_attachments(message, typed)):
        return
    if not await admitted():
        return
    user_text = await with_attachments(message, message.content)
    if user_text is not None:
        await answer(message.id, user_text, "too_long_files" if message.elements else "too_long")


async def with_attachments(message: cl.Message, typed: str) -> Optional[str]:
    """``typed`` as the model gets it, with the message's files' text; None when a file is refused."""
    files = [(e.name, e.mime or "", Path(e.path)) for e in message.elements or () if e.path]
    if not files:
        return typed
    attached, refused = await asyncio.to_thread(read_files, files, MAX_UPLOAD_BYTES,
                                             UPLOADS.max_files, PDF_LIMITS)
    if refused:
        await show_error(refusal(lang(), refused), "files_refused")
        return None
    for attachment in attached:
        if attachment.decoded_from_legacy:
            await notice(text(lang(), "file_decoded", name=attachment.name, encoding=attachment.encoding))
    return clean_text(prompt_with(typed, attached))


async def answer(message_id: str, user_text: str, too_long: str = "too_long",
                 resumed: Optional[in_flight.Partial] = None) -> None:
    """Answer a new, edited or regenerated message, or carry on a reply another process left
    (``resumed``), then offer Regenerate under the outcome; the history is kept after it."""
    try:
        await _answer(message_id, user_text, too_long, resumed)
    finally:
        remember()


async def _answer(message_id: str, user_text: str, too_long: str,
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
                            fitted.max_tokens, params, resumed)
    finally:
        await regenerate.offer(lang())


@cl.action_callback(regenerate.ACTION)
async def on_regenerate(action: cl.Action) -> None:
    asked = cl.user_session.get("conversation").last_asked()
    if asked is None or session_tasks.running():
        return
    cl.user_session.set("asked_at", time.perf_counter())
    await regenerate.withdraw()
    if not await admitted():
        await regenerate.offer(lang())
        return
    await switcher.clear_after(asked[0])  # the new reply takes the old one's place, as an edit's does
    session_tasks.start_stoppable(lambda: answer(*asked))


@cl.action_callback(switcher.ACTION)
async def on_version(action: cl.Action) -> None:
    if not session_tasks.running() and await switcher.switch(action, cl.user_session.get("conversation"),
                                                               reply_text, lang()):
        remember()


async def stream_answer(conversation: Conversation, message_id: str, user_text: str, model: str,
                        messages: list[dict], max_tokens: int, params: ChatParams,
                        resumed: Optional[in_flight.Partial] = None) -> None:
    so_far = resumed.text if resumed else ""
    reply = cl.Message(content=so_far, metadata={"kind": "reply"}, id=resumed.step_id if resumed else None)
    # Saved as it streams, so another process can finish it (app/conversation/in_flight.py).
    keeper = in_flight.Keeper(reply, in_flight.marker_now(
        params.temperature, params.top_p, resumed.marker.max_tokens if resumed else max_tokens),
        reply_store(), (message_id, user_text))
    batcher = TokenBatcher(DisplayStream(keeper.send, so_far), text=so_far)
    stats = ec.ReplyStats(asked_at=cl.user_session.get("asked_at"))
    # vLLM's own fields go to vLLM only: another server may refuse a field it does not
    # know (transformers serve answers HTTP 422); the seed is the OpenAI API's own.
    vllm = getattr(cl.user_session.get("server"), "kind", server_info.VLLM) == server_info.VLLM
    extra_body = sampling_extra(params, SETTINGS.ignore_eos and vllm) or {}
    if vllm and (group := engine_piece_tokens(STREAMING, SETTINGS.stream_interval_max)) > 1:
        extra_body["stream_interval"] = group  # vLLM's tokens per piece in a crowd (token_batcher)
    if vllm:
        extra_body.update(ec.LIVE_USAGE)  # a reply cut mid-stream goes on from its count (failover)
    chosen = ENGINES.current()
    pieces = RECENT.track(failover.resilient_reply(
        chosen.client, model, messages, stats,
        temperature=params.temperature, top_p=params.top_p, max_tokens=max_tokens,
        extra_body=extra_body or None, can_continue=vllm, wait_s=SETTINGS.continue_wait_s,
        on_wait=say_waiting, shown=so_far, produced=resumed.tokens if resumed else 0,
    ), stats, chosen.name)  # the live view's figures, per model
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
    cl.user_session.get("budget").sent(stats.prompt_tokens)
    STREAMING.finished(stats.tokens_per_s)
    chosen.finished(stats.tokens_per_s)
    chat_metrics.reply_finished(stats.user_ttft_s, stats.tokens_per_s, bool(stats.continued))
    if stats.prompt_tokens is not None and stats.completion_tokens is not None:
        append_usage(SETTINGS.usage_log, stats.prompt_tokens, stats.completion_tokens,
                     stats.ttft_s, stats.tokens_per_s, stats.finish_reason, stats.stamps(), login_name())
    reply.content = reply_text(Turn(user_text, batcher.text, {"line": line}))
    await switcher.send_reply(conversation, message_id, reply, lang())


def reply_text(turn: Turn) -> str:
    """A finished reply as the chat shows it: its text, then its figures line if it has one."""
    line = turn.figures.get("line")
    return display_text(turn.assistant) + (FIGURES_MARK + line + "*" if line else "")


def _counter(model: str):
    server: server_info.ServerInfo = cl.user_session.get("server")
    return token_count.counter(HTTP, server.url, model, server.counting, SETTINGS.api_key_value)


@cl.on_stop
async def on_stop() -> None:
    # Stop reaches the reply whatever started it: a message, an edit (which Chainlit does
    # not register) or a regeneration (docs/notes.md, "Chainlit 2.12").
    task: Optional[asyncio.Task] = cl.user_session.get("task")
    if task is not None and not task.done():
        task.cancel()
    for shown in reversed(cl.chat_context.get()):
        if shown.type == "assistant_message" and shown.content == CHAINLIT_STOP_MESSAGE:
            await shown.remove()
            break


@cl.on_app_shutdown
async def on_app_shutdown() -> None:
    # aiohttp (the client's transport) reports a session still open at exit on stderr.
    await ENGINES.close()


@cl.on_chat_end
async def on_chat_end() -> None:
    # Chainlit keeps every message of a chat in chat_context and never frees it (docs/notes.md).
    cl.chat_context.clear()
    chat_metrics.chat_closed()


# --- saved chats and login (ERNIE_CHAT_DB) ----------------------------------------

if SETTINGS.login_on:
    _SESSIONS = auth_sessions.start(SETTINGS)
    if SETTINGS.users is not None:
        login.install(SETTINGS, _SESSIONS)
    if SETTINGS.oidc_issuer is not None:
        oidc.install(SETTINGS, _SESSIONS)

if SETTINGS.chat_db is not None:
    chat_db.prepare_db(SETTINGS.chat_db)
    cl.data_layer(lambda: saved_chats.data_layer(SETTINGS.chat_db, chat_search.SearchingLayer))
    chat_search.install()
    share_page.install(SETTINGS.public_url, lambda thread: ENGINES.pick(saved_chats.thread_profile(thread))[0].name)

    @cl.on_chat_resume
    async def on_chat_resume(thread: dict) -> None:
        chosen = persona(saved_chats.thread_profile(thread))
        chat_metrics.chat_opened()
        conversation, versions = saved_chats.conversation_from_thread(
            thread, chosen.system_prompt or SETTINGS.system_prompt)
        start_session(conversation)
        switcher.restore(versions)
        # Chainlit put the thread's saved panel values (metadata) in the session: the chat
        # goes on with the settings it was made with, and the panel shows them.
        if saved := cl.context.session.chat_settings:
            use_params(restored(saved, cl.user_session.get("params"), max_reply_budget()))
        await send_panel()
        session_tasks.after_start(carry_on(thread))
        session_tasks.after_start(switcher.offer_all(lang()))  # on the replies the page shows then
        # Chainlit sends the saved steps right after this returns, and the browser replaces
        # what it shows with them: a notice sent now would vanish, so the notices follow them.
        if told := resume_notices():
            asyncio.create_task(notices_after(RESUME_NOTICE_DELAY_S, told))

    def resume_notices() -> list[tuple[str, str]]:
        """What a reopened chat is told, in order, as (text, kind)."""
        told = []
        if mapped := ENGINES.settle(lang()):  # first: current() then gives the model it goes on with
            told.append((mapped, "model_unknown"))
        if (engine := ENGINES.current()).asleep():  # nothing asked of it: its next message starts it
            told.append((text(lang(), "model_asleep", model=engine.name), "model_asleep"))
        if moved_here():
            told.append((text(lang(), "moved_saved"), "moved"))
        return told

    async def carry_on(thread: dict) -> None:
        """A reply still streaming for this chat goes on in this page (app/conversation/in_flight.py): from
        this process, or continued here where the process that made it is gone."""
        if await in_flight.attach(thread["id"]):
            return
        partial = in_flight.orphan_of(thread)
        if partial is not None:
            await take_over(partial, SAVED_STEPS)
